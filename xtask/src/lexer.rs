//! Rust source to the few tokens the module graph needs: identifiers (keywords included),
//! `::` and single punctuation characters, each with its line. Comments, string, byte-string,
//! raw-string and character literals and lifetimes are dropped, so a path written in a doc
//! comment or a string is never taken for an import. Not a full Rust lexer: numbers come out
//! as identifiers and multi-character operators other than `::` as their characters, which is
//! all the graph builder needs to tell paths apart.

/// One token and the line (1-based) it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub kind: Kind,
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// An identifier, keyword or number (`r#ident` as `ident`).
    Ident(String),
    /// `::`.
    PathSep,
    /// Any other punctuation character.
    Punct(char),
}

impl Token {
    pub fn is_ident(&self, s: &str) -> bool {
        matches!(&self.kind, Kind::Ident(i) if i == s)
    }
    pub fn is_punct(&self, c: char) -> bool {
        self.kind == Kind::Punct(c)
    }
    pub fn ident(&self) -> Option<&str> {
        match &self.kind {
            Kind::Ident(i) => Some(i),
            _ => None,
        }
    }
}

/// Splits `src` into tokens.
pub fn tokenize(src: &str) -> Vec<Token> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let n = chars.len();
    while i < n {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < n && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            // Block comments nest in Rust.
            let mut depth = 0usize;
            while i < n {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if let Some(end) = raw_string_end(&chars, i) {
            line += chars[i..end].iter().filter(|&&c| c == '\n').count();
            i = end;
        } else if c == '"' || (c == 'b' && chars.get(i + 1) == Some(&'"')) {
            i += if c == 'b' { 2 } else { 1 };
            while i < n && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if i < n && chars[i] == '\n' {
                    line += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' || (c == 'b' && chars.get(i + 1) == Some(&'\'')) {
            i = skip_char_or_lifetime(&chars, if c == 'b' { i + 1 } else { i });
        } else if c == 'r' && chars.get(i + 1) == Some(&'#') && chars.get(i + 2).is_some_and(|&c| is_ident_char(c)) {
            // A raw identifier: r#type.
            let start = i + 2;
            i = start;
            while i < n && is_ident_char(chars[i]) {
                i += 1;
            }
            out.push(Token { kind: Kind::Ident(chars[start..i].iter().collect()), line });
        } else if is_ident_char(c) {
            let start = i;
            while i < n && is_ident_char(chars[i]) {
                i += 1;
            }
            out.push(Token { kind: Kind::Ident(chars[start..i].iter().collect()), line });
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push(Token { kind: Kind::PathSep, line });
            i += 2;
        } else {
            out.push(Token { kind: Kind::Punct(c), line });
            i += 1;
        }
    }
    out
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// If a raw (byte) string literal starts at `i` (`r"…"`, `r#"…"#`, `br"…"`), the index just
/// past it.
fn raw_string_end(chars: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    // Not the tail of an identifier such as `bar"`: the caller only gets here at a token
    // start, so `r` begins the token.
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(chars.len())
}

/// At a `'`: skips a character literal (`'a'`, `'\n'`, `'\u{1F600}'`) or a lifetime (`'a`).
fn skip_char_or_lifetime(chars: &[char], i: usize) -> usize {
    let n = chars.len();
    if chars.get(i + 1) == Some(&'\\') {
        let mut j = i + 2;
        while j < n && chars[j] != '\'' {
            j += 1;
        }
        return j + 1;
    }
    if chars.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    // A lifetime or label: the quote and the identifier after it.
    let mut j = i + 1;
    while j < n && is_ident_char(chars[j]) {
        j += 1;
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(src: &str) -> Vec<String> {
        tokenize(src).into_iter().filter_map(|t| t.ident().map(String::from)).collect()
    }

    #[test]
    fn comments_strings_and_chars_are_dropped() {
        let src = r##"
            // use crate::a;
            /* use crate::b; /* nested */ still */
            let s = "crate::c";
            let r = r#"crate::d "quoted""#;
            let ch = '"'; let q = '\''; fn f<'a>(x: &'a str) {}
            use crate::e;
        "##;
        let ids = idents(src);
        for gone in ["a", "b", "c", "d"] {
            assert!(!ids.contains(&gone.to_string()), "{gone} leaked: {ids:?}");
        }
        assert!(ids.contains(&"e".to_string()));
        assert!(ids.contains(&"x".to_string()));
    }

    #[test]
    fn lines_are_counted_through_comments_and_strings() {
        let toks = tokenize("/* a\n b */ x \"s\nt\" y\n z");
        let lines: Vec<usize> = toks.iter().map(|t| t.line).collect();
        assert_eq!(lines, vec![2, 3, 4]);
    }

    #[test]
    fn path_separator_is_one_token() {
        let toks = tokenize("crate::a::{b, c}");
        assert_eq!(toks[1].kind, Kind::PathSep);
        assert!(toks[4].is_punct('{'));
    }
}
