//! `cargo run -p xtask -- cycles`: every crate of the workspace (each member's `src/lib.rs`,
//! `src/main.rs` and `src/bin/*.rs`), its module graph ([`crate::modgraph`]), and every
//! strongly connected component of more than one module: an import cycle. Each is reported
//! with the edges that close it and where each is written; the command fails if there is one.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use crate::modgraph::{self, show, Graph, ModPath, Site, Source};

/// One crate: the package it belongs to and its root file.
#[derive(Debug, Clone)]
pub struct CrateRoot {
    pub package: String,
    pub root: PathBuf,
}

/// One import cycle: sibling modules (children of one parent), sorted, and the edges that
/// close it, each with the paths written in code that make it.
#[derive(Debug)]
pub struct Cycle {
    pub modules: Vec<ModPath>,
    /// (sibling from, sibling to, module that wrote the path, module it names, where).
    pub edges: Vec<(ModPath, ModPath, ModPath, ModPath, Site)>,
}

/// Sibling pair (from, to) → the edges behind it: (module that wrote the path, module it
/// names, where).
pub type Lifted = BTreeMap<(ModPath, ModPath), Vec<(ModPath, ModPath, Site)>>;

/// The crate's edges lifted to siblings: a path from `a::x` naming `b::y` is an edge
/// `a -> b` between the children of their nearest common ancestor. A path between a module
/// and its own ancestor or descendant (`super::Item`, a parent re-exporting a child) is
/// containment, not an import, and makes no edge. Keyed by sibling pair, with every
/// original edge behind it.
pub fn lifted(g: &Graph) -> Lifted {
    let mut out = Lifted::new();
    for (from, to) in &g.edges {
        for (target, site) in to {
            if from.starts_with(target) || target.starts_with(from) {
                continue;
            }
            let k = from.iter().zip(target).take_while(|(a, b)| a == b).count();
            let key = (from[..=k].to_vec(), target[..=k].to_vec());
            out.entry(key).or_default().push((from.clone(), target.clone(), site.clone()));
        }
    }
    out
}

/// The cycles of one crate: the strongly connected components of more than one module in
/// its lifted graph ([`lifted`]), so every cycle is among siblings.
pub fn cycles(g: &Graph) -> Vec<Cycle> {
    let lift = lifted(g);
    let nodes: Vec<&ModPath> = g.modules.keys().collect();
    let index: BTreeMap<&ModPath, usize> = nodes.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (a, b) in lift.keys() {
        if let (Some(&i), Some(&j)) = (index.get(a), index.get(b)) {
            adj[i].push(j);
        }
    }
    let mut out: Vec<Cycle> = tarjan(&adj)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut modules: Vec<ModPath> = c.into_iter().map(|i| nodes[i].clone()).collect();
            modules.sort();
            let mut edges = Vec::new();
            for ((a, b), behind) in &lift {
                if modules.contains(a) && modules.contains(b) {
                    for (from, to, site) in behind {
                        edges.push((a.clone(), b.clone(), from.clone(), to.clone(), site.clone()));
                    }
                }
            }
            Cycle { modules, edges }
        })
        .collect();
    out.sort_by(|x, y| x.modules.cmp(&y.modules));
    out
}

/// Tarjan's strongly connected components, iterative (no recursion depth limit).
fn tarjan(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = adj.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut comps = Vec::new();
    for start in 0..n {
        if index[start] != usize::MAX {
            continue;
        }
        // (node, next edge to look at)
        let mut work = vec![(start, 0usize)];
        index[start] = next;
        low[start] = next;
        next += 1;
        stack.push(start);
        on_stack[start] = true;
        while let Some(&mut (v, ref mut e)) = work.last_mut() {
            if let Some(&w) = adj[v].get(*e) {
                *e += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut comp = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                comps.push(comp);
            }
        }
    }
    comps
}

/// The report of one cycle: its modules and, for each edge between two of them, the paths
/// that make it and where each is written.
pub fn describe(cycle: &Cycle, base: &Path) -> String {
    let mut s = String::new();
    let names: Vec<String> = cycle.modules.iter().map(show).collect();
    let _ = writeln!(s, "  cycle of {} modules: {}", cycle.modules.len(), names.join(", "));
    for (a, b, from, to, site) in &cycle.edges {
        let file = site.file.strip_prefix(base).unwrap_or(&site.file);
        let via = if (a, b) == (from, to) { String::new() } else { format!(" (by {} -> {})", show(from), show(to)) };
        let _ = writeln!(s, "    {} -> {}{via}  {}:{}", show(a), show(b), file.display(), site.line);
    }
    s
}

/// The workspace's crates: for each member listed in the root `Cargo.toml`, its package
/// name and root files.
pub fn workspace_crates(src: &dyn Source, root: &Path) -> Result<Vec<CrateRoot>, String> {
    let manifest = root.join("Cargo.toml");
    let text = src.read(&manifest).ok_or_else(|| format!("{}: cannot read", manifest.display()))?;
    let members =
        toml_string_array(&text, "members").ok_or_else(|| format!("{}: no workspace members", manifest.display()))?;
    let mut out = Vec::new();
    for m in members {
        let dir = root.join(&m);
        let package = src
            .read(&dir.join("Cargo.toml"))
            .and_then(|t| package_name(&t))
            .ok_or_else(|| format!("{}: no package name", dir.join("Cargo.toml").display()))?;
        let mut roots = vec![dir.join("src/lib.rs"), dir.join("src/main.rs")];
        if let Ok(entries) = std::fs::read_dir(dir.join("src/bin")) {
            let mut bins: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "rs"))
                .collect();
            bins.sort();
            roots.extend(bins);
        }
        for r in roots {
            if src.read(&r).is_some() {
                out.push(CrateRoot { package: package.clone(), root: r });
            }
        }
    }
    Ok(out)
}

/// The strings of a TOML array `key = [ "a", "b" ]` (possibly over several lines).
fn toml_string_array(text: &str, key: &str) -> Option<Vec<String>> {
    let start = text.lines().position(|l| l.trim_start().starts_with(key) && l.contains('='))?;
    let rest: String = text.lines().skip(start).collect::<Vec<_>>().join("\n");
    let open = rest.find('[')?;
    let close = rest[open..].find(']')? + open;
    Some(
        rest[open + 1..close]
            .split(',')
            .map(|s| s.trim().trim_matches('"').to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

/// `name = "…"` of the `[package]` table.
fn package_name(text: &str) -> Option<String> {
    let mut in_package = false;
    for l in text.lines() {
        let l = l.trim();
        if l.starts_with('[') {
            in_package = l == "[package]";
        } else if in_package && l.starts_with("name") {
            return l.split_once('=').map(|(_, v)| v.trim().trim_matches('"').to_string());
        }
    }
    None
}

/// Checks every crate of the workspace at `root`; returns the report and whether it found a
/// cycle.
pub fn check(src: &dyn Source, root: &Path) -> Result<(String, bool), String> {
    let mut report = String::new();
    let mut found = false;
    for c in workspace_crates(src, root)? {
        let g = modgraph::build(src, &c.root);
        let rel = c.root.strip_prefix(root).unwrap_or(&c.root);
        for (file, name) in &g.missing {
            let _ = writeln!(
                report,
                "{} ({}): mod {name}: no file for it (declared in {})",
                c.package,
                rel.display(),
                file.display()
            );
        }
        let cs = cycles(&g);
        if cs.is_empty() {
            continue;
        }
        found = true;
        let _ = writeln!(report, "{} ({}): {} import cycle(s)", c.package, rel.display(), cs.len());
        for cycle in &cs {
            report.push_str(&describe(cycle, root));
        }
    }
    Ok((report, found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modgraph::tests::fixture;

    fn cycle_names(files: &[(&str, &str)]) -> Vec<Vec<String>> {
        let g = modgraph::build(&fixture(files), Path::new("src/lib.rs"));
        cycles(&g).iter().map(|c| c.modules.iter().map(show).collect()).collect()
    }

    #[test]
    fn two_module_cycle_is_found() {
        let c = cycle_names(&[
            ("src/lib.rs", "mod a; mod b;"),
            ("src/a.rs", "use crate::b::X;"),
            ("src/b.rs", "fn f() { crate::a::g() }"),
        ]);
        assert_eq!(c, vec![vec!["a", "b"]]);
    }

    #[test]
    fn chain_is_no_cycle() {
        let c = cycle_names(&[
            ("src/lib.rs", "mod a; mod b; mod c;"),
            ("src/a.rs", "use crate::b;"),
            ("src/b.rs", "use crate::c;"),
            ("src/c.rs", "use std::fmt;"),
        ]);
        assert!(c.is_empty(), "{c:?}");
    }

    #[test]
    fn long_cycle_through_grouped_imports() {
        let c = cycle_names(&[
            ("src/lib.rs", "mod a; mod b; mod c; mod d;"),
            ("src/a.rs", "use crate::{b::{X, Y}, d};"),
            ("src/b.rs", "use crate::{c};"),
            ("src/c.rs", "use super::a::Z;"),
            ("src/d.rs", ""),
        ]);
        assert_eq!(c, vec![vec!["a", "b", "c"]]);
    }

    #[test]
    fn parent_and_child_is_containment_not_a_cycle() {
        let c = cycle_names(&[
            ("src/lib.rs", "mod p; use p::P;"),
            ("src/p.rs", "mod q; pub use q::Q; pub struct P; fn f() { crate::g() }"),
            ("src/p/q.rs", "use super::P; use crate::p; pub struct Q;"),
        ]);
        assert!(c.is_empty(), "{c:?}");
    }

    #[test]
    fn cycle_through_a_child_is_lifted_to_its_parent() {
        // a::inner names b, b names a: a (with its children) and b import each other.
        let c = cycle_names(&[
            ("src/lib.rs", "mod a; mod b;"),
            ("src/a.rs", "mod inner;"),
            ("src/a/inner.rs", "use crate::b::B;"),
            ("src/b.rs", "use crate::a::A;"),
        ]);
        assert_eq!(c, vec![vec!["a", "b"]]);
    }

    #[test]
    fn cycle_among_children_of_one_parent() {
        let c = cycle_names(&[
            ("src/lib.rs", "mod p;"),
            ("src/p.rs", "mod x; mod y;"),
            ("src/p/x.rs", "fn f() { super::y::g() }"),
            ("src/p/y.rs", "use crate::p::x;"),
        ]);
        assert_eq!(c, vec![vec!["p::x", "p::y"]]);
    }

    #[test]
    fn tests_of_a_module_may_use_any_module() {
        let c = cycle_names(&[
            ("src/lib.rs", "mod a; mod b;"),
            ("src/a.rs", "#[cfg(test)] mod tests { use crate::b::helper; }"),
            ("src/b.rs", "use crate::a::A;"),
        ]);
        assert!(c.is_empty(), "{c:?}");
    }

    #[test]
    fn two_separate_cycles_are_both_reported() {
        let c = cycle_names(&[
            ("src/lib.rs", "mod a; mod b; mod c; mod d;"),
            ("src/a.rs", "use crate::b;"),
            ("src/b.rs", "use crate::a;"),
            ("src/c.rs", "use crate::d;"),
            ("src/d.rs", "use crate::c;"),
        ]);
        assert_eq!(c, vec![vec!["a", "b"], vec!["c", "d"]]);
    }

    #[test]
    fn workspace_members_and_roots() {
        let fx = fixture(&[
            ("ws/Cargo.toml", "[workspace]\nmembers = [\"one\",\n  \"two\"]\n"),
            ("ws/one/Cargo.toml", "[package]\nname = \"one-pkg\"\n"),
            ("ws/one/src/lib.rs", "mod a; mod b;"),
            ("ws/one/src/a.rs", "use crate::b;"),
            ("ws/one/src/b.rs", "use crate::a;"),
            ("ws/two/Cargo.toml", "[package]\nname = \"two\"\n[dependencies]\nname = \"x\"\n"),
            ("ws/two/src/main.rs", "fn main() {}"),
        ]);
        let crates = workspace_crates(&fx, Path::new("ws")).unwrap();
        let names: Vec<(&str, PathBuf)> = crates.iter().map(|c| (c.package.as_str(), c.root.clone())).collect();
        assert_eq!(
            names,
            vec![("one-pkg", PathBuf::from("ws/one/src/lib.rs")), ("two", PathBuf::from("ws/two/src/main.rs"))]
        );
        let (report, found) = check(&fx, Path::new("ws")).unwrap();
        assert!(found);
        assert!(report.contains("one-pkg (one/src/lib.rs): 1 import cycle(s)"), "{report}");
        assert!(report.contains("a -> b  one/src/a.rs:1"), "{report}");
    }
}
