//! Architecture rules for `src/`, read from the source text alone (std only, no parser
//! crate), so that they hold while files move:
//! 1. a module may import another top-level unit (`src/x/` or `src/x.rs`) only if that
//!    unit's rank in `RANKS` is strictly lower than its own unit's;
//! 2. no cycle of modules (one file is one module), of any length.
//!
//! `POOLCTL_ARCH_SRC=/some/src` checks another tree; `POOLCTL_ARCH_CYCLES_ONLY=1` checks
//! only rule 2. Every violation is printed, so the output doubles as a worklist.
//!
//! A path counts as an import of the module file that really holds the item: `use`
//! bindings (renames, globs) are followed, so a `mod.rs` that re-exports its children
//! is no cycle with them unless it also defines what they take from it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// The source of truth for layering: a unit may import only units of LOWER rank.
const RANKS: &[(&str, u32)] = &[
    ("core", 0),      // the vocabulary every room shares
    ("classify", 1),  // one upstream attempt -> one class
    ("wire", 2),      // wire formats; needs only core and classify (its failures)
    ("admission", 2), // buckets, queue, capacity maths
    ("policy", 3),    // cards, budget, decision table, health, breaker, capability
    ("store", 4),     // where health, breakers and buckets live
    ("config", 5),    // pool config: names the wire endpoint and the store it opens
    ("router", 6),    // the routing loop, probe, the embedding queue
    ("harness", 7),   // scenarios, mocks, the chaos runner
    ("serve", 7),     // the gateway
    ("cli", 8),       // commands
];

type ModPath = Vec<String>;

/// Keywords that define a name in the module (for deciding whether to follow a glob).
const DEFS: [&str; 9] = [
    "fn", "struct", "enum", "trait", "type", "const", "static", "mod", "union",
];

#[derive(Clone)]
struct Tok {
    s: String,
    line: usize,
}

/// A binary is keyed `<bin src/main.rs>`: exempt from ranks, and never in a cycle.
fn is_bin(m: &[String]) -> bool {
    m.first().is_some_and(|u| u.starts_with("<bin "))
}

/// The token at `k`, or "" past the end.
fn tok(t: &[Tok], k: usize) -> &str {
    t.get(k).map_or("", |x| x.s.as_str())
}

fn is_ident(s: &str) -> bool {
    s.starts_with(|c: char| c.is_alphabetic() || c == '_')
}

/// Tokens of code: comments, strings and char literals are dropped, since a path in them
/// is prose. `::` is one token; any other punctuation character is one token.
fn lex(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let word = |i: usize| at(i).is_alphanumeric() || at(i) == '_';
    let word_end = |i: usize| (i..).find(|&k| !word(k)).unwrap();
    // From just past an opening quote to just past the closing one and its `#`s.
    let str_end = |mut i: usize, hashes: usize, escapes: bool| {
        while i < c.len() && !(c[i] == '"' && (1..=hashes).all(|h| at(i + h) == '#')) {
            i += if escapes && c[i] == '\\' { 2 } else { 1 };
        }
        i + 1 + hashes
    };
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    while i < c.len() {
        let start = i;
        let mut push = |s: String, end: usize| {
            out.push(Tok { s, line });
            end
        };
        i = match (c[i], at(i + 1)) {
            ('/', '/') => (i..c.len()).find(|&k| c[k] == '\n').unwrap_or(c.len()),
            ('/', '*') => {
                let (mut depth, mut k) = (0, i); // block comments nest
                while k < c.len() {
                    match (c[k], at(k + 1)) {
                        ('/', '*') => (depth, k) = (depth + 1, k + 2),
                        ('*', '/') => (depth, k) = (depth - 1, k + 2),
                        _ => k += 1,
                    }
                    if depth == 0 {
                        break;
                    }
                }
                k
            }
            ('"', _) => str_end(i + 1, 0, true),
            // `'x'` and `'\n'` are chars; `'a` without a quote right after is a lifetime.
            ('\'', '\\') => (i + 3..c.len()).find(|&k| c[k] == '\'').unwrap_or(i) + 1,
            ('\'', _) if at(i + 2) == '\'' => i + 3,
            ('\'', _) => word_end(i + 1),
            (':', ':') => push("::".into(), i + 2),
            (ch, _) if ch.is_ascii_digit() => word_end(i),
            _ if word(i) => {
                let end = word_end(i);
                let w: String = c[i..end].iter().collect();
                let hashes = (end..).take_while(|&k| at(k) == '#').count();
                match (w.as_str(), at(end)) {
                    ("r" | "br" | "cr", _) if at(end + hashes) == '"' => {
                        str_end(end + hashes + 1, hashes, false)
                    }
                    ("b" | "c", '"') => str_end(end + 1, 0, true),
                    ("r", '#') => end + 1, // raw identifier `r#type`: the name is next
                    ("b", '\'') => end,    // byte char: the quote is next
                    _ => push(w, end),
                }
            }
            (ch, _) if ch.is_whitespace() => i + 1,
            (ch, _) => push(ch.into(), i + 1),
        };
        line += c[start..i.min(c.len())]
            .iter()
            .filter(|&&ch| ch == '\n')
            .count();
    }
    out
}

/// Index of the bracket that closes the one at `open` (or of the last token).
fn matching(t: &[Tok], open: usize) -> usize {
    let mut depth = 0;
    for (k, x) in t.iter().enumerate().skip(open) {
        depth += i32::from(matches!(&*x.s, "(" | "[" | "{"));
        depth -= i32::from(matches!(&*x.s, ")" | "]" | "}"));
        if depth == 0 {
            return k;
        }
    }
    t.len() - 1
}

/// `cfg(test)` or `cfg(all(.., test, ..))`: never in the library build.
/// `cfg(not(test))` and `cfg(any(test, ..))` are.
fn is_cfg_test(a: &[Tok]) -> bool {
    let s: Vec<&str> = a.iter().map(|x| x.s.as_str()).collect();
    match s.as_slice() {
        ["cfg", "(", "test", ")"] => true,
        ["cfg", "(", "all", "(", rest @ ..] => {
            let mut depth = 0;
            rest.iter().any(|&x| {
                depth += i32::from(x == "(") - i32::from(x == ")");
                depth == 0 && x == "test"
            })
        }
        _ => false,
    }
}

/// End (exclusive) of the item, statement, field or match arm that starts at `k`.
fn item_end(t: &[Tok], mut k: usize) -> usize {
    while tok(t, k) == "#" {
        k = matching(t, k + 1) + 1; // more attributes
    }
    let mut j = k;
    while matches!(tok(t, j), "pub" | "async" | "unsafe" | "extern" | "default") {
        j = 1 + if tok(t, j + 1) == "(" {
            matching(t, j + 1)
        } else {
            j
        };
    }
    let kind = tok(t, j);
    // These end at `;` only, whatever braces their initialiser holds.
    let semi_only =
        matches!(kind, "static" | "let" | "use") || kind == "const" && tok(t, j + 1) != "fn";
    let is_item = DEFS.contains(&kind) || matches!(kind, "impl" | "macro_rules" | "let" | "use");
    let mut depth = 0;
    for (n, x) in t.iter().enumerate().skip(k) {
        match x.s.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" if depth == 0 => return n, // the enclosing group ends
            ")" | "]" | "}" => {
                depth -= 1;
                if depth == 0 && x.s == "}" && !semi_only {
                    return n + 1;
                }
            }
            ";" if depth == 0 => return n + 1,
            "," if depth == 0 && !is_item => return n + 1,
            _ => {}
        }
    }
    t.len()
}

/// One leaf of a `use` tree: `use a::{b as c, d::*}` has leaves `a::b` (bound as `c`)
/// and `a::d::*`.
struct Leaf {
    segs: Vec<String>,
    glob: bool,
    name: Option<String>,
    line: usize,
}

fn use_tree(t: &[Tok], k: &mut usize, prefix: &[String], out: &mut Vec<Leaf>) {
    let mut segs = prefix.to_vec();
    while tok(t, *k) == "::" || is_ident(tok(t, *k)) && tok(t, *k) != "as" {
        if tok(t, *k) != "::" {
            segs.push(tok(t, *k).to_string());
        }
        *k += 1;
    }
    if tok(t, *k) == "{" {
        *k += 1;
        while !matches!(tok(t, *k), "}" | "") {
            use_tree(t, k, &segs, out);
            *k += usize::from(tok(t, *k) == ",");
        }
        *k += 1;
        return;
    }
    let glob = tok(t, *k) == "*";
    *k += usize::from(glob);
    // `a::{self}` binds `a`; `x as _` binds nothing.
    let back = 1 + usize::from(segs.last().is_some_and(|l| l == "self"));
    let named = segs.len().checked_sub(back).filter(|_| !glob);
    let mut name = named.map(|n| segs[n].clone());
    if tok(t, *k) == "as" {
        name = Some(tok(t, *k + 1).to_string()).filter(|n| n != "_");
        *k += 2;
    }
    let line = t[*k - 1].line;
    out.push(Leaf {
        segs,
        glob,
        name,
        line,
    });
}

/// One module file: what it declares and defines, its `use` leaves, its inline paths
/// (`crate::..`, `super::..`, `self::..`, `alias::..`) and, once loaded, its bindings.
#[derive(Default)]
struct Module {
    file: String,
    children: HashSet<String>,
    test_children: HashSet<String>,
    test_file: bool,
    defined: HashSet<String>,
    uses: Vec<Leaf>,
    inline: Vec<(Vec<String>, usize)>,
    /// Names bound by `use` -> absolute paths. Private ones count too: code that
    /// compiles reaches them only from a descendant, as `super::Name`.
    bindings: HashMap<String, ModPath>,
    globs: Vec<ModPath>,
    /// First segments that name a module here: `mod x;` children and `use`d modules.
    aliases: HashMap<String, ModPath>,
}

fn parse(src: &str) -> Module {
    let (raw, mut m, mut t, mut i) = (lex(src), Module::default(), Vec::new(), 0);
    while i < raw.len() {
        let inner = tok(&raw, i + 1) == "!";
        let open = i + 1 + usize::from(inner);
        if raw[i].s == "#" && tok(&raw, open) == "[" {
            let close = matching(&raw, open);
            if is_cfg_test(&raw[open + 1..close]) {
                m.test_file |= inner;
                let after = close + 1;
                let end = if inner { after } else { item_end(&raw, after) };
                let item: Vec<&str> = raw[close + 1..end].iter().map(|x| x.s.as_str()).collect();
                if let Some(w) = item.windows(3).find(|w| w[0] == "mod" && w[2] == ";") {
                    m.test_children.insert(w[1].to_string());
                }
                i = end;
                continue;
            }
        }
        t.push(raw[i].clone());
        i += 1;
    }
    let mut i = 0;
    while i < t.len() {
        let (cur, prev, next) = (tok(&t, i), tok(&t, i.wrapping_sub(1)), tok(&t, i + 1));
        if cur == "use" && (is_ident(next) || next == "::" || next == "{") {
            let mut k = i + 1;
            use_tree(&t, &mut k, &[], &mut m.uses);
            i = (k..t.len()).find(|&k| tok(&t, k) == ";").unwrap_or(t.len());
        } else if cur == "mod" && tok(&t, i + 2) == ";" {
            m.children.insert(next.to_string());
        } else if DEFS.contains(&cur) && is_ident(next) {
            m.defined.insert(next.to_string());
        } else if cur == "macro_rules" && next == "!" {
            m.defined.insert(tok(&t, i + 2).to_string());
        } else if is_ident(cur) && next == "::" && !matches!(prev, "::" | "$" | ".") {
            let (mut segs, line) = (vec![cur.to_string()], t[i].line);
            while tok(&t, i + 1) == "::" && is_ident(tok(&t, i + 2)) {
                segs.push(tok(&t, i + 2).to_string());
                i += 2;
            }
            m.inline.push((segs, line));
        }
        i += 1;
    }
    m
}

/// Absolute segments of a path written in module `here`; `None` for other crates.
fn absolutize(m: &Module, here: &[String], segs: &[String]) -> Option<ModPath> {
    let (mut base, rest) = match segs[0].as_str() {
        "crate" => (vec![], &segs[1..]),
        "self" => (here.to_vec(), &segs[1..]),
        "super" => {
            let ups = segs.iter().take_while(|s| *s == "super").count();
            (here[..here.len().checked_sub(ups)?].to_vec(), &segs[ups..])
        }
        first => (m.aliases.get(first)?.clone(), &segs[1..]),
    };
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(base)
}

/// One reference from a module to another, where it is written.
struct Edge {
    from: ModPath,
    to: ModPath,
    file: String,
    line: usize,
    /// The path as written, and the module it names if re-exports led elsewhere.
    text: String,
}

struct Crate {
    mods: BTreeMap<ModPath, Module>,
}

impl Crate {
    /// The module a path lands in: its longest module prefix, then on through the `use`
    /// binding of the item it names (renames and globs too); `true` if it IS a module.
    /// From `depth` 8 on, nothing is followed.
    fn resolve(&self, path: &[String], depth: u32) -> (ModPath, bool) {
        let n = (0..=path.len())
            .rev()
            .find(|&n| self.mods.contains_key(&path[..n]));
        let (prefix, rest) = path.split_at(n.unwrap_or(0));
        let Some(name) = rest.first() else {
            return (path.to_vec(), true);
        };
        let Some(m) = self.mods.get(prefix).filter(|_| depth < 8) else {
            return (prefix.to_vec(), false);
        };
        // What the module defines itself wins: a `use` of the same name can only be
        // local to a function. A glob: the one whose module has the name, or the only one.
        if !m.defined.contains(name) {
            if let Some(target) = m.bindings.get(name).filter(|t| t.as_slice() != path) {
                return self.resolve(&[target, &rest[1..]].concat(), depth + 1);
            }
            let has = |g: &&ModPath| {
                let gm = &self.mods[&self.resolve(g, depth + 1).0];
                gm.defined.contains(name) || gm.bindings.contains_key(name)
            };
            let mut hits = m.globs.iter().filter(has);
            let glob = match (hits.next(), hits.next()) {
                (Some(g), None) => Some(g),
                (None, _) if m.globs.len() == 1 => m.globs.first(),
                _ => None,
            };
            if let Some(g) = glob {
                return self.resolve(&[g, rest].concat(), depth + 1);
            }
        }
        (prefix.to_vec(), false)
    }

    /// Recomputes every module's `use` bindings from its current aliases.
    fn bind(&mut self) {
        for (here, m) in self.mods.iter_mut() {
            let (mut bindings, mut globs) = (HashMap::new(), Vec::new());
            for l in &m.uses {
                match (absolutize(m, here, &l.segs), &l.name) {
                    (Some(abs), _) if l.glob => globs.push(abs),
                    (Some(abs), Some(name)) => drop(bindings.insert(name.clone(), abs)),
                    _ => {}
                }
            }
            (m.bindings, m.globs) = (bindings, globs);
        }
    }

    fn edges(&self) -> Vec<Edge> {
        let mut out = Vec::new();
        for (here, m) in &self.mods {
            let uses = m.uses.iter().map(|l| (&l.segs, l.line, l.glob));
            let paths = uses.chain(m.inline.iter().map(|(s, l)| (s, *l, false)));
            for (segs, line, glob) in paths {
                let Some(abs) = absolutize(m, here, segs) else {
                    continue;
                };
                let (to, naive) = (self.resolve(&abs, 0).0, self.resolve(&abs, 8).0);
                if to.is_empty() || &to == here {
                    continue; // items of the crate root, and a module's own items
                }
                let written = segs.join("::").replace("::self", "::{self}");
                let mut text = format!("`{written}{}`", ["", "::*"][usize::from(glob)]);
                if naive != to && !naive.is_empty() {
                    write!(text, " (re-exported by {})", naive.join("::")).unwrap();
                }
                let (from, file) = (here.clone(), m.file.clone());
                out.push(Edge {
                    from,
                    to,
                    file,
                    line,
                    text,
                });
            }
        }
        out
    }
}

/// Reads a tree: `lib.rs` is the root, `a.rs` or `a/mod.rs` is `a`, `a/b.rs` is `a::b`.
/// Files never compiled (undeclared, or declared under `cfg(test)`) are left out; the
/// undeclared ones are added to `notes`.
fn load(src: &Path, notes: &mut Vec<String>) -> Crate {
    // Binaries: `src/main.rs` and every `[[bin]]` path in Cargo.toml. Each is a crate
    // root of its own that imports the library as `poolctl::`; nothing imports it.
    let manifest = std::fs::read_to_string(src.with_file_name("Cargo.toml")).unwrap_or_default();
    let mut bins = vec!["src/main.rs".to_string()];
    for section in manifest.split("\n[").filter(|s| s.starts_with("[bin]]")) {
        let paths = section
            .lines()
            .filter_map(|l| l.trim().strip_prefix("path"));
        bins.extend(paths.filter_map(|v| v.split('"').nth(1)).map(String::from));
    }
    let (mut all, mut dirs) = (BTreeMap::new(), vec![src.to_path_buf()]);
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let f = entry.unwrap().path();
            if f.is_dir() {
                dirs.push(f);
                continue;
            } else if f.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = f.strip_prefix(src).unwrap();
            let mut m = parse(&std::fs::read_to_string(&f).unwrap());
            m.file = format!("src/{}", rel.to_string_lossy().replace('\\', "/"));
            let mut path: ModPath = rel.iter().map(|s| s.to_string_lossy().into()).collect();
            let last = path.pop().unwrap();
            if bins.contains(&m.file) {
                path = vec![format!("<bin {}>", m.file)];
            } else if last != "mod.rs" && !(path.is_empty() && last == "lib.rs") {
                path.push(last.trim_end_matches(".rs").to_string());
            }
            all.insert(path, m);
        }
    }
    // (declared all the way up, compiled only under cfg(test))
    let status = |path: &ModPath| {
        let mut declared = true;
        for n in 1..=path.len() {
            match all.get(&path[..n - 1]) {
                Some(up) if up.test_children.contains(&path[n - 1]) => return (false, true),
                Some(up) => declared &= up.children.contains(&path[n - 1]),
                None => declared = false,
            }
            if all.get(&path[..n]).is_some_and(|m| m.test_file) {
                return (false, true);
            }
        }
        (declared || is_bin(path), false)
    };
    for (_, m) in all.iter().filter(|(k, _)| status(k) == (false, false)) {
        notes.push(format!(
            "{} is not declared by a `mod` in its parent",
            m.file
        ));
    }
    let keep: BTreeSet<ModPath> = all.keys().filter(|k| status(k).0).cloned().collect();
    all.retain(|k, _| keep.contains(k));
    let mut c = Crate { mods: all };
    for (here, m) in c.mods.iter_mut() {
        let child = |ch: &String| (ch.clone(), [here, &[ch.clone()][..]].concat());
        m.aliases = m.children.iter().map(child).collect();
        if is_bin(here) {
            m.aliases.insert("poolctl".into(), vec![]); // a binary's `poolctl::` is our `crate::`
        }
    }
    // A `use` that binds a module makes its name an alias as well: after
    // `use crate::wire;`, the path `wire::openai::call` reaches `wire::openai`.
    c.bind();
    let mut found = Vec::new();
    for (here, m) in &c.mods {
        for l in m.uses.iter() {
            if let (Some(name), Some(abs)) = (&l.name, absolutize(m, here, &l.segs)) {
                if let (target, true) = c.resolve(&abs, 0) {
                    found.push((here.clone(), name.clone(), target));
                }
            }
        }
    }
    for (here, name, target) in found {
        let m = c.mods.get_mut(&here).unwrap();
        m.aliases.entry(name).or_insert(target);
    }
    c.bind();
    c
}

/// Breadth-first search from `from`: each node reached -> the node it was reached from.
fn bfs(adj: &[Vec<usize>], from: usize) -> HashMap<usize, usize> {
    let (mut prev, mut queue) = (HashMap::from([(from, from)]), VecDeque::from([from]));
    while let Some(v) = queue.pop_front() {
        for &w in &adj[v] {
            if let std::collections::hash_map::Entry::Vacant(e) = prev.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    prev
}

/// Every cycle, grouped by strongly connected component: modules that reach each other
/// (found by reachability, which is plenty fast for a hundred files).
fn cycles(nodes: &[&ModPath], evidence: &BTreeMap<(usize, usize), Vec<&Edge>>) -> Vec<String> {
    let mut adj = vec![Vec::new(); nodes.len()];
    for &(a, b) in evidence.keys() {
        adj[a].push(b);
    }
    let reach: Vec<HashMap<usize, usize>> = (0..nodes.len()).map(|v| bfs(&adj, v)).collect();
    let (mut seen, mut out) = (HashSet::new(), Vec::new());
    for v in 0..nodes.len() {
        let scc: BTreeSet<usize> = reach[v]
            .keys()
            .copied()
            .filter(|w| reach[*w].contains_key(&v))
            .collect();
        if scc.len() < 2 || !seen.insert(v) {
            continue;
        }
        seen.extend(scc.iter().copied());
        let inside: Vec<_> = evidence
            .iter()
            .filter(|((a, b), _)| scc.contains(a) && scc.contains(b))
            .collect();
        let names: Vec<String> = scc.iter().map(|&i| nodes[i].join("::")).collect();
        let mut text = format!("cycle among {}:", names.join(", "));
        // A shortest cycle through each edge not shown yet: together they show every
        // edge of the component, any of which may be the one to cut.
        let mut shown = HashSet::new();
        for &(&(a, b), _) in &inside {
            if shown.insert((a, b)) {
                let mut cycle = vec![a]; // b's shortest way back to a, walked backwards
                while cycle[cycle.len() - 1] != b {
                    cycle.push(reach[b][&cycle[cycle.len() - 1]]);
                }
                cycle.push(a);
                cycle.reverse();
                shown.extend(cycle.windows(2).map(|w| (w[0], w[1])));
                let path: Vec<String> = cycle.iter().map(|&i| nodes[i].join("::")).collect();
                write!(text, "\n    {}", path.join(" -> ")).unwrap();
            }
        }
        let mut lines = BTreeSet::new();
        for (_, es) in inside {
            let e = es.iter().min_by_key(|e| e.line).unwrap();
            let (from, to, text) = (e.from.join("::"), e.to.join("::"), &e.text);
            let mut what = format!("{from} -> {to} via {text}");
            if es.len() > 1 {
                write!(what, " (+{} more)", es.len() - 1).unwrap();
            }
            lines.insert((&e.file, e.line, what));
        }
        for (file, line, what) in lines {
            write!(text, "\n      {file}:{line}: {what}").unwrap();
        }
        out.push(text);
    }
    out.sort();
    out
}

/// Every violation in the tree at `src`, one readable entry each, sorted.
fn check(src: &Path, ranks: &[(&str, u32)], cycles_only: bool) -> Vec<String> {
    let (mut out, mut upward) = (Vec::new(), BTreeSet::new());
    let c = load(src, &mut out);
    let edges = c.edges();
    let rank: HashMap<&str, u32> = ranks.iter().copied().collect();
    let mut missing = BTreeMap::new();
    for (k, m) in c.mods.iter().filter(|(k, _)| !k.is_empty() && !is_bin(k)) {
        let whole = k.len() == 1 && !m.file.ends_with("mod.rs"); // `src/x.rs`, not `src/x/`
        let shown = if whole {
            m.file.clone()
        } else {
            format!("src/{}/", k[0])
        };
        missing.entry(&k[0]).or_insert(shown);
    }
    missing.retain(|u, _| !rank.contains_key(u.as_str()));
    out.extend(
        missing
            .values()
            .map(|shown| format!("{shown} is not in RANKS")),
    );
    let rank_of = |m: &ModPath| Some(*rank.get(m.first()?.as_str())?);
    for e in &edges {
        if let (Some(ru), Some(rv)) = (rank_of(&e.from), rank_of(&e.to)) {
            let (from, to, u, text) = (e.from.join("::"), e.to.join("::"), &e.from[0], &e.text);
            if *u != e.to[0] && rv >= ru {
                let what = format!("{from} imports {to} (rank {rv}) via {text}, ");
                let why = format!("but {from}'s unit {u} has rank {ru}");
                upward.insert((e.file.clone(), e.line, what + &why));
            }
        }
    }
    let upward = upward
        .into_iter()
        .map(|(file, line, what)| format!("{file}:{line}: {what}"));
    out.extend(upward);
    if cycles_only {
        out.clear();
    }
    // Nodes: module files, but the root (edges to it are dropped) and the binary (which
    // nothing imports) cannot be in a cycle.
    let nodes: Vec<&ModPath> = c
        .mods
        .keys()
        .filter(|k| !k.is_empty() && !is_bin(k))
        .collect();
    let idx: HashMap<&ModPath, usize> = nodes.iter().enumerate().map(|(i, k)| (*k, i)).collect();
    let mut evidence: BTreeMap<(usize, usize), Vec<&Edge>> = BTreeMap::new();
    for e in &edges {
        if let (Some(&a), Some(&b)) = (idx.get(&e.from), idx.get(&e.to)) {
            evidence.entry((a, b)).or_default().push(e);
        }
    }
    out.extend(cycles(&nodes, &evidence));
    out
}

#[test]
fn architecture() {
    let src = std::env::var_os("POOLCTL_ARCH_SRC").map(PathBuf::from);
    let src = src.unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let cycles_only = std::env::var("POOLCTL_ARCH_CYCLES_ONLY").is_ok_and(|v| v == "1");
    let found = check(&src, RANKS, cycles_only);
    for (unit, _) in RANKS {
        if !src.join(unit).is_dir() && !src.join(format!("{unit}.rs")).is_file() {
            eprintln!(
                "note: RANKS lists {unit}, which is not (yet) in {}",
                src.display()
            );
        }
    }
    if !found.is_empty() {
        eprintln!("{}", found.join("\n"));
        let n = found.len();
        panic!("{n} architecture violation(s), listed above (rules: tests/architecture.rs)");
    }
}

/// A throwaway `src/`, removed on drop (also when an assertion fails).
struct Tree(PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Each `=== path` line starts that file's text.
fn tree(files: &str) -> Tree {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("poolctl-arch-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir); // left by an earlier process with this id
    for part in files.split("\n=== ").skip(1) {
        let (path, text) = part.split_once('\n').unwrap_or((part, ""));
        std::fs::create_dir_all(dir.join(path).parent().unwrap()).unwrap();
        std::fs::write(dir.join(path), text).unwrap();
    }
    Tree(dir)
}

const BAD: &str = r###"
=== lib.rs
pub mod low; pub mod high; pub mod cyc; pub mod re; pub mod ok;
pub mod deep; pub mod nest; pub mod stray;
=== low.rs
const Q: char = '"';
fn f<'a>(x: &'a str) -> &'a str { x }
const R: &str = r#"a "b" crate::cyc::X"#;
/* a /* b */ crate::cyc::X */ pub struct L;
use crate::high::H;
=== high.rs
pub struct H;
pub fn g() {}
=== cyc/mod.rs
pub mod a;
pub mod b;
=== cyc/a.rs
pub fn fa() { super::b::fb() }
=== cyc/b.rs
pub fn fb() { super::a::fa() }
=== re/mod.rs
pub mod inner;
pub use inner::Thing;
pub struct Base;
=== re/inner.rs
pub struct Thing(pub super::Base);
=== ok/mod.rs
mod a;
mod b;
mod c;
pub use a::A;
pub use b::B as Bee;
pub use c::*;
=== ok/a.rs
pub struct A(super::Bee, super::C);
=== ok/b.rs
pub struct B(crate::ok::c::C);
=== ok/c.rs
pub struct C;
=== deep/mod.rs
pub mod x;
=== deep/x/mod.rs
pub mod y;
=== deep/x/y.rs
pub fn h() -> super::super::super::high::H { todo!() }
=== nest.rs
use crate::{high::{self as hh, H as _}, cyc::*};
fn n() { hh::g(); }
=== stray.rs
=== orphan.rs
use crate::high::H;
"###;

/// Nothing in `low` may reach `high`, and nothing does outside comments, strings and tests.
const CLEAN: &str = r###"
=== lib.rs
pub mod low;
pub mod high;
=== high.rs
pub struct H;
pub fn g(_: crate::low::L) {}
=== low/more_tests.rs
use crate::high::H;
=== low/mod.rs
//! crate::high::H
/// [`crate::high::H`]
// crate::high::H
/* crate::high::H */
pub struct L;
const S: &str = "crate::high::H \" crate::high::H";
const B: &[u8] = b"crate::high::H";
const R: &str = r##"crate::high::H "# "##;
macro_rules! m { () => { $crate::high::H } }
#[cfg(test)]
mod tests { use crate::high::H; }
#[cfg(test)]
mod more_tests;
#[cfg(test)]
fn helper() -> crate::high::H { crate::high::H }
#[cfg(all(test, unix))]
const X: crate::high::H = crate::high::H {};
pub fn f<'a>(s: &'a str) -> &'a str { let _c = '\''; s }"###;

#[test]
fn checker_reports_what_it_should_and_nothing_else() {
    let ranks = [
        ("low", 0),
        ("deep", 0),
        ("nest", 0),
        ("high", 1),
        ("cyc", 1),
        ("re", 1),
        ("ok", 1),
    ];
    let bad = tree(BAD);
    let found = check(&bad.0, &ranks, false);
    let all = found.join("\n");
    let expected = [
        "src/orphan.rs is not declared by a `mod` in its parent",
        "src/stray.rs is not in RANKS",
        // (a) upward imports, also after tricky literals and through `super::super::super`
        "src/low.rs:5: low imports high (rank 1) via `crate::high::H`, but low's unit low has rank 0",
        "src/deep/x/y.rs:1: deep::x::y imports high (rank 1) via `super::super::super::high::H`",
        "src/nest.rs:1: nest imports high (rank 1) via `crate::high::{self}`",
        "src/nest.rs:1: nest imports high (rank 1) via `crate::high::H`",
        "src/nest.rs:1: nest imports cyc (rank 1) via `crate::cyc::*`",
        "src/nest.rs:2: nest imports high (rank 1) via `hh::g`",
        // (b) a cycle of inline `super::` paths
        "cycle among cyc::a, cyc::b:\n    cyc::a -> cyc::b -> cyc::a",
        "src/cyc/a.rs:1: cyc::a -> cyc::b via `super::b::fb`",
        // (c) a cycle through a `pub use`: `Base` is defined in `re` itself
        "cycle among re, re::inner:\n    re -> re::inner -> re",
        "src/re/inner.rs:1: re::inner -> re via `super::Base`",
    ];
    for e in expected {
        assert!(all.contains(e), "missing {e:?} in:\n{all}");
    }
    // Nothing else; in particular no cycle in `ok`, whose children's `super::` paths
    // name items of their siblings, re-exported (renamed, globbed) by `ok`.
    assert_eq!(found.len(), 10, "{all}");

    let clean = tree(CLEAN);
    let found = check(&clean.0, &[("low", 0), ("high", 1)], false);
    assert!(
        found.is_empty(),
        "clean tree reported:\n{}",
        found.join("\n")
    );
    // ...and the literals above did not hide the code after them.
    let dirty = tree(&format!("{CLEAN}\nuse crate::high::H;"));
    let all = check(&dirty.0, &[("low", 0), ("high", 1)], false).join("\n");
    assert!(
        all.contains("src/low/mod.rs:19: low imports high (rank 1)"),
        "{all}"
    );
}
