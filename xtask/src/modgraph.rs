//! A crate's module graph: the modules reached from its root file through `mod` declarations
//! (file modules and inline `mod x { … }` blocks, each a node), and an edge from module `a`
//! to module `b` for every path in `a` that names `b` or something inside it.
//!
//! Paths counted: `use` trees starting with `crate::`, `super::`, `self::` or the name of a
//! child module (`use crate::{a, b::{c, d}}` is expanded), and the same prefixes in code
//! (`crate::x::y(…)`, `super::f()`, `child::g()`). A path resolves to the longest prefix that
//! is a module: `crate::a::b::C` names `a::b` when `a/b.rs` exists, else `a`. `$crate` paths
//! (macro bodies) and `pub(in crate::…)` are not imports. A module's own items do not make
//! an edge, nor does declaring a child (`mod x;`): only naming one.
//!
//! Modules declared `#[cfg(test)]` (and everything inside them) are left out: a module's
//! tests may use any module of the crate to check it, which is no dependency of the code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::lexer::{tokenize, Kind, Token};

/// A module's path inside its crate: empty for the crate root.
pub type ModPath = Vec<String>;

/// Where one edge was seen: the file and line of the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub file: PathBuf,
    pub line: usize,
}

/// The graph of one crate (one root file).
#[derive(Debug, Default)]
pub struct Graph {
    /// Every module, with the file it lives in.
    pub modules: BTreeMap<ModPath, PathBuf>,
    /// from → to → the first place the edge was seen.
    pub edges: BTreeMap<ModPath, BTreeMap<ModPath, Site>>,
    /// `mod x;` declarations whose file was not found (reported, not fatal).
    pub missing: Vec<(PathBuf, String)>,
    /// Inline `#[cfg(test)] mod x { … }` blocks: nothing written inside makes an edge.
    pub test_modules: Vec<ModPath>,
}

/// Reads a file's text; `None` when it does not exist. Lets tests use in-memory fixtures.
pub trait Source {
    fn read(&self, path: &Path) -> Option<String>;
}

/// The real file system.
pub struct Disk;

impl Source for Disk {
    fn read(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }
}

/// One parsed file: its tokens and its module.
struct File {
    path: PathBuf,
    module: ModPath,
    tokens: Vec<Token>,
}

/// Builds the graph of the crate whose root file is `root` (`src/lib.rs`, `src/main.rs`).
pub fn build(src: &dyn Source, root: &Path) -> Graph {
    let mut g = Graph::default();
    let mut files = Vec::new();
    let dir = root.parent().unwrap_or(Path::new(".")).to_path_buf();
    load(src, root.to_path_buf(), Vec::new(), dir, &mut g, &mut files);
    for f in &files {
        edges_of(f, &mut g);
    }
    g
}

/// Loads `path` as `module`, records it and its inline modules, and recurses into the files
/// its `mod x;` declarations name.
fn load(src: &dyn Source, path: PathBuf, module: ModPath, child_dir: PathBuf, g: &mut Graph, files: &mut Vec<File>) {
    let Some(text) = src.read(&path) else { return };
    let tokens = tokenize(&text);
    g.modules.insert(module.clone(), path.clone());
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut children = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        if t.is_punct('{') {
            depth += 1;
        } else if t.is_punct('}') {
            depth = depth.saturating_sub(1);
            if stack.last().is_some_and(|&(_, d)| d == depth) {
                stack.pop();
            }
        } else if t.is_ident("mod") && !preceded_by_dollar(&tokens, i) {
            if let (Some(name), Some(next)) = (tokens.get(i + 1).and_then(Token::ident), tokens.get(i + 2)) {
                let mut m = module.clone();
                m.extend(stack.iter().map(|(n, _)| n.clone()));
                m.push(name.to_string());
                let test = is_cfg_test(&tokens, i);
                if next.is_punct('{') {
                    if test {
                        g.test_modules.push(m.clone());
                    }
                    g.modules.insert(m, path.clone());
                    stack.push((name.to_string(), depth));
                    depth += 1;
                    i += 3;
                    continue;
                } else if next.is_punct(';') && !test {
                    let mut dir = child_dir.clone();
                    dir.extend(stack.iter().map(|(n, _)| n.as_str()));
                    children.push((m, dir, name.to_string()));
                }
            }
        }
        i += 1;
    }
    files.push(File { path: path.clone(), module, tokens });
    for (m, dir, name) in children {
        let flat = dir.join(format!("{name}.rs"));
        let nested = dir.join(&name).join("mod.rs");
        if src.read(&flat).is_some() {
            load(src, flat, m, dir.join(&name), g, files);
        } else if src.read(&nested).is_some() {
            load(src, nested, m, dir.join(&name), g, files);
        } else {
            g.missing.push((path.clone(), name));
        }
    }
}

/// Whether the `mod` at `i` carries `#[cfg(test)]` among its attributes (before its
/// visibility, if any).
fn is_cfg_test(tokens: &[Token], i: usize) -> bool {
    let mut j = i;
    // Visibility: `pub`, `pub(crate)`, `pub(super)`, `pub(in path)`.
    if j > 0 && tokens[j - 1].is_punct(')') {
        while j > 0 && !tokens[j - 1].is_punct('(') {
            j -= 1;
        }
        j = j.saturating_sub(1);
    }
    if j > 0 && tokens[j - 1].is_ident("pub") {
        j -= 1;
    }
    // Attributes `#[...]`, last first.
    while j > 0 && tokens[j - 1].is_punct(']') {
        let close = j - 1;
        let mut depth = 0usize;
        let mut k = close;
        loop {
            if tokens[k].is_punct(']') {
                depth += 1;
            } else if tokens[k].is_punct('[') {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            if k == 0 {
                return false;
            }
            k -= 1;
        }
        let inner = &tokens[k + 1..close];
        if inner.len() == 4
            && inner[0].is_ident("cfg")
            && inner[1].is_punct('(')
            && inner[2].is_ident("test")
            && inner[3].is_punct(')')
        {
            return true;
        }
        if k == 0 || !tokens[k - 1].is_punct('#') {
            return false;
        }
        j = k - 1;
    }
    false
}

fn preceded_by_dollar(tokens: &[Token], i: usize) -> bool {
    i > 0 && tokens[i - 1].is_punct('$')
}

/// Scans one file for paths and adds their edges.
fn edges_of(f: &File, g: &mut Graph) {
    let toks = &f.tokens;
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        let mut here = f.module.clone();
        here.extend(stack.iter().map(|(n, _)| n.clone()));
        if t.is_punct('{') {
            depth += 1;
        } else if t.is_punct('}') {
            depth = depth.saturating_sub(1);
            if stack.last().is_some_and(|&(_, d)| d == depth) {
                stack.pop();
            }
        } else if t.is_ident("mod") && toks.get(i + 2).is_some_and(|n| n.is_punct('{')) {
            if let Some(name) = toks.get(i + 1).and_then(Token::ident) {
                stack.push((name.to_string(), depth));
                depth += 1;
                i += 3;
                continue;
            }
        } else if t.is_ident("use") && !preceded_by_dollar(toks, i) && !toks.get(i + 1).is_some_and(|n| n.is_punct('<'))
        {
            // (`use<'a>` in `impl Trait + use<'a>` captures lifetimes; it imports nothing.)
            let mut paths = Vec::new();
            let end = use_tree(toks, i + 1, &[], &mut paths);
            for p in paths {
                add_edge(g, &here, &p, &f.path, t.line);
            }
            i = end;
            continue;
        } else if starts_code_path(toks, i, &here, g) {
            let mut path = vec![t.ident().unwrap_or_default().to_string()];
            let mut j = i + 1;
            while toks.get(j).is_some_and(|s| s.kind == Kind::PathSep) {
                match toks.get(j + 1).and_then(Token::ident) {
                    Some(id) => path.push(id.to_string()),
                    None => break,
                }
                j += 2;
            }
            add_edge(g, &here, &path, &f.path, t.line);
            i = j;
            continue;
        }
        i += 1;
    }
}

/// Whether a path in code starts at `i`: `crate::`, `super::`, `self::` or `child::`, not
/// after `$` (`$crate`), `::` (the middle of a longer path) or `in` (`pub(in crate::a)`).
fn starts_code_path(toks: &[Token], i: usize, here: &ModPath, g: &Graph) -> bool {
    let Some(id) = toks[i].ident() else { return false };
    if toks.get(i + 1).is_none_or(|t| t.kind != Kind::PathSep) {
        return false;
    }
    if i > 0 && (toks[i - 1].is_punct('$') || toks[i - 1].kind == Kind::PathSep || toks[i - 1].is_ident("in")) {
        return false;
    }
    matches!(id, "crate" | "super" | "self") || is_child(g, here, id)
}

fn is_child(g: &Graph, here: &ModPath, name: &str) -> bool {
    let mut m = here.clone();
    m.push(name.to_string());
    g.modules.contains_key(&m)
}

/// Parses a use tree from `i` (just after `use`, or inside a group) up to its end: the `;`
/// of the statement, or the `,`/`}` closing a group member. Pushes every full path (the
/// prefix joined with each leaf) and returns the index after the tree (after the `;` at the
/// top level).
fn use_tree(toks: &[Token], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path: Vec<String> = prefix.to_vec();
    let top = prefix.is_empty();
    loop {
        let Some(t) = toks.get(i) else { return i };
        match &t.kind {
            Kind::PathSep => i += 1,
            Kind::Ident(id) if id == "as" => {
                // The alias: skip it.
                i += 2;
            }
            Kind::Ident(id) => {
                if id != "self" || path.is_empty() {
                    path.push(id.clone());
                }
                i += 1;
            }
            Kind::Punct('*') => i += 1,
            Kind::Punct('{') => {
                i += 1;
                loop {
                    i = use_tree(toks, i, &path, out);
                    match toks.get(i) {
                        Some(t) if t.is_punct(',') => i += 1,
                        Some(t) if t.is_punct('}') => {
                            i += 1;
                            break;
                        }
                        _ => return i,
                    }
                }
                // A group ends this tree; its members pushed their own paths.
                path.clear();
                if top {
                    return skip_to_semicolon(toks, i);
                }
                return i;
            }
            Kind::Punct(';') if top => {
                if !path.is_empty() {
                    out.push(path);
                }
                return i + 1;
            }
            Kind::Punct(',') | Kind::Punct('}') if !top => {
                if path.len() > prefix.len() || (path.len() == prefix.len() && !path.is_empty()) {
                    out.push(path);
                }
                return i;
            }
            _ => i += 1,
        }
    }
}

fn skip_to_semicolon(toks: &[Token], mut i: usize) -> usize {
    while toks.get(i).is_some_and(|t| !t.is_punct(';')) {
        i += 1;
    }
    i + 1
}

/// Resolves `path` (as written in module `here`) to the module it names and records the
/// edge, unless it names `here` itself or nothing inside the crate.
fn add_edge(g: &mut Graph, here: &ModPath, path: &[String], file: &Path, line: usize) {
    if g.test_modules.iter().any(|t| here.starts_with(t)) {
        return;
    }
    let Some(target) = resolve(g, here, path) else { return };
    if &target == here {
        return;
    }
    g.edges.entry(here.clone()).or_default().entry(target).or_insert_with(|| Site { file: file.to_path_buf(), line });
}

/// The module a path names: the longest prefix of it that is a module of the crate.
fn resolve(g: &Graph, here: &ModPath, path: &[String]) -> Option<ModPath> {
    let mut segs = path.iter().peekable();
    let mut base: ModPath = match segs.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segs.next();
            Vec::new()
        }
        Some("self") => {
            segs.next();
            here.clone()
        }
        Some("super") => {
            let mut b = here.clone();
            while segs.peek().is_some_and(|s| s.as_str() == "super") {
                segs.next();
                b.pop()?;
            }
            b
        }
        Some(first) if is_child(g, here, first) => here.clone(),
        _ => return None,
    };
    for s in segs {
        base.push(s.clone());
        if !g.modules.contains_key(&base) {
            base.pop();
            break;
        }
    }
    Some(base)
}

/// A module path as written in reports: `crate` for the root, else `a::b`.
pub fn show(m: &ModPath) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::*;

    /// In-memory files.
    pub struct Fixture(pub HashMap<PathBuf, String>);

    impl Source for Fixture {
        fn read(&self, path: &Path) -> Option<String> {
            self.0.get(path).cloned()
        }
    }

    pub fn fixture(files: &[(&str, &str)]) -> Fixture {
        Fixture(files.iter().map(|(p, s)| (PathBuf::from(p), s.to_string())).collect())
    }

    fn edges(g: &Graph) -> BTreeSet<(String, String)> {
        g.edges.iter().flat_map(|(a, to)| to.keys().map(move |b| (show(a), show(b)))).collect()
    }

    fn pairs(p: &[(&str, &str)]) -> BTreeSet<(String, String)> {
        p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn file_modules_flat_and_mod_rs_and_inline() {
        let fx = fixture(&[
            ("src/lib.rs", "mod a; pub mod b; mod c { fn f() {} }"),
            ("src/a.rs", "mod inner;"),
            ("src/a/inner.rs", ""),
            ("src/b/mod.rs", "mod deep;"),
            ("src/b/deep.rs", ""),
        ]);
        let g = build(&fx, Path::new("src/lib.rs"));
        let mods: Vec<String> = g.modules.keys().map(show).collect();
        assert_eq!(mods, ["crate", "a", "a::inner", "b", "b::deep", "c"]);
        assert!(g.missing.is_empty());
    }

    #[test]
    fn grouped_and_nested_use_trees() {
        let fx = fixture(&[
            ("src/lib.rs", "mod a; mod b; mod c; mod d;"),
            ("src/a.rs", "use crate::{b, c::{X, Y as Z}, d::self};"),
            ("src/b.rs", ""),
            ("src/c.rs", ""),
            ("src/d.rs", "use std::io; use super::b::*;"),
        ]);
        let g = build(&fx, Path::new("src/lib.rs"));
        assert_eq!(edges(&g), pairs(&[("a", "b"), ("a", "c"), ("a", "d"), ("d", "b")]));
    }

    #[test]
    fn paths_in_code_and_relative_children() {
        let fx = fixture(&[
            ("src/lib.rs", "mod a; mod b; pub use a::Thing; fn f() { b::g(); }"),
            ("src/a.rs", "mod x; fn f() { crate::b::g(); self::x::h(); let v = Vec::<u8>::new(); }"),
            ("src/a/x.rs", "fn h() { super::super::b::g() }"),
            ("src/b.rs", "macro_rules! m { () => { $crate::a::f() } } pub(in crate::a) fn g() {}\nfn h<'a>() -> impl Sized + use<'a> { crate::a::f() }"),
        ]);
        let g = build(&fx, Path::new("src/lib.rs"));
        assert_eq!(
            edges(&g),
            pairs(&[("crate", "a"), ("crate", "b"), ("a", "b"), ("a", "a::x"), ("a::x", "b"), ("b", "a")])
        );
    }

    #[test]
    fn comments_and_strings_make_no_edge() {
        let fx = fixture(&[
            ("src/lib.rs", "mod a; mod b;"),
            ("src/a.rs", "//! See [`crate::b`].\n/// crate::b::f\nfn f() { let s = \"crate::b\"; }"),
            ("src/b.rs", "use crate::a;"),
        ]);
        let g = build(&fx, Path::new("src/lib.rs"));
        assert_eq!(edges(&g), pairs(&[("b", "a")]));
    }

    #[test]
    fn inline_module_is_its_own_node() {
        let fx = fixture(&[
            ("src/lib.rs", "mod a; mod b;"),
            ("src/a.rs", "pub fn f() {} mod inner { use super::*; use crate::b::helper; }"),
            ("src/b.rs", "use crate::a::f;"),
        ]);
        let g = build(&fx, Path::new("src/lib.rs"));
        assert_eq!(edges(&g), pairs(&[("a::inner", "a"), ("a::inner", "b"), ("b", "a")]));
    }

    #[test]
    fn cfg_test_modules_make_no_edge() {
        let fx = fixture(&[
            ("src/lib.rs", "mod a; mod b; #[cfg(test)] mod tests;"),
            ("src/tests.rs", "use crate::a;"),
            ("src/a.rs", "pub fn f() {} #[cfg(test)]\n#[allow(unused)] pub(crate) mod tests { use crate::b::helper; }"),
            ("src/b.rs", "use crate::a::f; #[cfg(not(test))] mod real { use crate::a::g; }"),
        ]);
        let g = build(&fx, Path::new("src/lib.rs"));
        assert_eq!(edges(&g), pairs(&[("b", "a"), ("b::real", "a")]));
        assert!(!g.modules.contains_key(&vec!["tests".to_string()]));
    }

    #[test]
    fn missing_module_file_is_reported() {
        let fx = fixture(&[("src/main.rs", "mod gone;")]);
        let g = build(&fx, Path::new("src/main.rs"));
        assert_eq!(g.missing, vec![(PathBuf::from("src/main.rs"), "gone".to_string())]);
    }
}
