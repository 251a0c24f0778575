#!/usr/bin/python3
"""Finds import loops between the source files of each workspace crate.

  tools/module-loops.py            lists loops of more than --max files; exit 1 if any
  tools/module-loops.py --all      also lists the loops of 2 to --max files
  tools/module-loops.py --max N    the largest loop allowed (default 3, issue 31:
                                   "no import loop of more than 3 files anywhere")
  tools/module-loops.py --warn     report only: the same output, exit 0

The crates are the members in the root Cargo.toml (so not fuzz/). A crate's
files are those its roots (src/lib.rs, src/main.rs, src/bin/*) reach through
`mod x;` (x.rs, x/mod.rs or `#[path]`), without what `#[cfg(test)]` (or
`cfg(all(test, ..))`) covers: a module, a file (`#![cfg(test)]`), one item.

An edge A -> B: file A writes a path to something of B's module,
  - in a `use` (any visibility, `use a::{b, c::D}` trees too): `crate::…`,
    `super::…`, `self::…`, or `x::…` where x is a module A declares or a
    name A imports;
  - in code: the same paths (`crate::log::error(…)`, `super::X`).
A path ends at the deepest module that exists (`crate::a::b::Item` -> the
file of a::b, else of a); if the next name there is a `use` of that module
(a re-export, `pub use x::Item`), the path goes on through it, so a
`use crate::Item` re-exported by lib.rs from x.rs is an edge to x.rs.
`mod child;` alone is no edge; a child's `use super::X` is an edge to the
parent. A loop is a strongly connected component: files that reach each other.

Blind spots (a text scan, not rustc): methods called with `.` are no edge,
so impl blocks of one type spread over several files (`impl Slots` in
limits' slots.rs, slots/dispatch.rs, fair/hand_off.rs) call each other
unseen; names a glob brings (`use super::*`, `pub use x::*`) are not
followed (the edge goes to the glob's module); paths a macro builds are not
seen, and macro bodies are scanned as plain text (`$crate::x` counts);
`#[cfg]` other than test is ignored (every configuration at once); `#[path]`
inside an inline module and `include!` are not resolved; paths between
crates (`limits::Slots`) are out of scope.
"""
import argparse, os, re, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


LEX = re.compile(r'''(?P<line>//[^\n]*)|(?P<block>/\*)
    |b?r(?P<hashes>\#*)"(?P<raw>.*?)"(?P=hashes) | b?"(?P<str>(?:\\.|[^"\\])*)"
    |b?'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'
    |[A-Za-z_]\w*|.''', re.S | re.X)


def strip(src):
    """Comments and literals blanked (newlines kept); returns the text and
    {offset of a string literal: its contents}."""
    out, strings, i = [], {}, 0
    while i < len(src):
        m = LEX.match(src, i)
        j = m.end()
        if m.group('block'):
            depth = 1
            while j < len(src) and depth:
                step = src[j:j + 2]
                depth += (step == '/*') - (step == '*/')
                j += 2 if step in ('/*', '*/') else 1
        elif m.group('raw') is not None or m.group('str') is not None:
            strings[i] = m.group('raw') if m.group('raw') is not None else m.group('str')
        elif not m.group('line') and not m.group().startswith(("'", "b'")):
            out.append(m.group())
            i = j
            continue
        out.append(blank(src[i:j]))
        i = j
    return ''.join(out), strings


def blank(s):
    return re.sub(r'[^\n]', ' ', s)


def item_end(text, i):
    """The end of the item (or field) starting at i: after its `;` or `,`, after
    its braces, or before the brace closing what holds it."""
    depth, angle = 0, 0
    while i < len(text):
        c = text[i]
        if c in '([':
            depth += 1
        elif c in ')]':
            depth -= 1
        elif c == '<':
            angle += 1
        elif c == '>' and text[i - 1] not in '-=':
            angle = max(angle - 1, 0)
        elif depth == 0 and c == '{':
            return match_brace(text, i)
        elif depth == 0 and (c == ';' or c == ',' and angle == 0):
            return i + 1
        elif depth == 0 and c == '}':
            return i
        i += 1
    return i


def match_brace(text, i):
    depth = 0
    for j in range(i, len(text)):
        depth += (text[j] == '{') - (text[j] == '}')
        if depth == 0:
            return j + 1
    return len(text)


CFG_TEST = re.compile(r'#\[\s*cfg\s*\(\s*(test|all\s*\([^\]]*\btest\b[^\]]*\))\s*\)\s*\]')


def drop_test_items(text):
    """Blanks every item under #[cfg(test)] (or cfg(all(test, …)))."""
    pos = 0
    while m := CFG_TEST.search(text, pos):
        pos = m.end()
        if 'not' not in m.group(1):
            end = item_end(text, m.end())
            text = text[:m.start()] + blank(text[m.start():end]) + text[end:]
    return text


def use_paths(tree):
    """`a::{b, c::{self, D as E}}` -> [(['a','b'], 'b'), (['a','c'], 'c'), (['a','c','D'], 'E')]."""
    out = []

    def walk(prefix, s):
        parts, depth, cur = [], 0, ''
        for c in s:
            if c == ',' and depth == 0:
                parts.append(cur)
                cur = ''
                continue
            depth += (c == '{') - (c == '}')
            cur += c
        parts.append(cur)
        for p in (p.strip() for p in parts):
            if '{' in p:
                head = p[:p.index('{')]
                walk(prefix + re.findall(r'[\w$*]+', head), p[p.index('{') + 1:p.rindex('}')])
            elif p:
                m = re.fullmatch(r'(.*?)(?:\s+as\s+(\w+))?', p, re.S)
                segs = re.findall(r'[\w$*]+', m.group(1))
                path = prefix + ([] if segs == ['self'] else segs)
                if path:
                    out.append((path, m.group(2) or path[-1]))

    walk([], tree)
    return out


class Crate:
    """One crate's module tree (module path -> file) and the paths each file
    writes (module it is written in, segments, line)."""

    def __init__(self, root_file):
        self.mods, self.refs, self.uses, self.children = {}, {}, {}, {}
        self.load(root_file, (), True)

    def load(self, path, modpath, mod_rs):
        if not os.path.exists(path):
            return
        text, strings = strip(open(path).read())
        if re.match(r'\s*#!\[\s*cfg\s*\(\s*test\s*\)\s*\]', text):
            return
        text = drop_test_items(text)
        self.mods[modpath] = path
        refs = self.refs.setdefault(path, [])
        here = os.path.dirname(path)
        # Inline modules: (module, directory its `mod x;` look in, brace depth, start, end).
        base = here if mod_rs else os.path.join(here, os.path.basename(path)[:-3])
        stack, spans = [(modpath, base, -1)], [(modpath, 0, len(text))]
        depth, i = 0, 0
        token = re.compile(r'[{}]|\b(mod|use)\b')
        line = lambda pos: text.count('\n', 0, pos) + 1
        while m := token.search(text, i):
            i = m.end()
            if m.group() in '{}':
                depth += 1 if m.group() == '{' else -1
                if stack[-1][2] == depth:
                    stack.pop()
                continue
            cur, cur_base, _ = stack[-1]
            if m.group(1) == 'use':
                i = text.find(';', i) + 1 or len(text)
                for segs, alias in use_paths(text[m.end():i - 1]):
                    refs.append((cur, segs, line(m.start())))
                    self.uses.setdefault(cur, {})[alias] = (cur, segs)
                continue
            d = re.compile(r'\s*(?:r#)?(\w+)\s*([;{])').match(text, i)
            if not d:
                continue
            name, child = d.group(1), cur + (d.group(1),)
            self.children.setdefault(cur, set()).add(name)
            i = d.end()
            if d.group(2) == '{':
                self.mods[child] = path
                stack.append((child, os.path.join(cur_base, name), depth))
                spans.append((child, d.end(), match_brace(text, d.end() - 1)))
                depth += 1
                continue
            attr = re.search(r'#\[\s*path\s*=([^\]]*)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub\b[^;{]*)?$', text[:m.start()])
            lit = [k for k in strings if attr and attr.start(1) <= k < attr.end(1)]
            if lit:
                self.load(os.path.normpath(os.path.join(here, strings[lit[0]])), child, True)
            elif os.path.exists(os.path.join(cur_base, name + '.rs')):
                self.load(os.path.join(cur_base, name + '.rs'), child, False)
            else:
                self.load(os.path.join(cur_base, name, 'mod.rs'), child, True)
        # Paths in code (`use` items blanked): crate::…, super::…, self::…, child::….
        code = re.sub(r'\buse\b[^;]*;', lambda u: blank(u.group()), text)
        for m in re.finditer(r'(?<![\w:$])\$?((?:crate|[a-z_]\w*)(?:\s*::\s*\w+)+)', code):
            cur = max((s for s in spans if s[1] <= m.start() < s[2]), key=lambda s: len(s[0]))[0]
            refs.append((cur, re.split(r'\s*::\s*', m.group(1)), line(m.start())))

    def absolute(self, cur, segs, hops=0):
        """Segments written in module `cur` -> a path from the crate root, or
        None (a path into another crate)."""
        if segs[0] in ('crate', '$crate'):
            return list(segs[1:])
        if segs[0] in ('self', 'super'):
            base = list(cur)
            while segs and segs[0] in ('self', 'super'):
                if segs[0] == 'super':
                    if not base:
                        return None
                    base.pop()
                segs = segs[1:]
            return base + list(segs)
        if segs[0] in self.children.get(cur, ()):
            return list(cur) + list(segs)
        via = self.uses.get(cur, {}).get(segs[0])
        if via and hops < 8 and len(segs) > 1:
            head = self.absolute(*via, hops=hops + 1)
            return None if head is None else head + list(segs[1:])
        return None

    def target(self, cur, segs):
        """The file holding what a path names, re-exports followed; None for
        another crate's item."""
        path = self.absolute(cur, segs)
        for _ in range(8):
            if path is None:
                return None
            k = next(k for k in range(len(path), -1, -1) if tuple(path[:k]) in self.mods)
            mod = tuple(path[:k])
            via = self.uses.get(mod, {}).get(path[k]) if k < len(path) and path[k] != '*' else None
            if not via or via == (cur, segs):
                break
            head = self.absolute(*via)
            path = None if head is None else head + path[k + 1:]
        return self.mods[mod]

    def edges(self):
        """{(file, file): (line, path) of the first reference}."""
        out = {}
        for f, refs in self.refs.items():
            for cur, segs, line in refs:
                t = self.target(cur, segs)
                if t and t != f:
                    out.setdefault((f, t), (line, '::'.join(segs)))
        return out


def loops(files, edges):
    """The strongly connected components of more than one file: files that
    reach each other (a graph of a few dozen files: plain searches do)."""
    succ = {f: {b for a, b in edges if a == f} for f in files}
    reach = {}
    for f in files:
        seen, todo = set(), [f]
        while todo:
            for n in succ[todo.pop()] - seen:
                seen.add(n)
                todo.append(n)
        reach[f] = seen
    comps = {frozenset(g for g in reach[f] if f in reach[g]) for f in files if f in reach[f]}
    return sorted(sorted(c) for c in comps)


def members():
    text = open(os.path.join(ROOT, 'Cargo.toml')).read()
    block = re.search(r'^members\s*=\s*\[(.*?)\]', text, re.S | re.M).group(1)
    return re.findall(r'"([^"]+)"', block)


def roots(pkg):
    src = os.path.join(ROOT, pkg, 'src')
    out = [os.path.join(src, f) for f in ('lib.rs', 'main.rs') if os.path.exists(os.path.join(src, f))]
    bins = os.path.join(src, 'bin')
    if os.path.isdir(bins):
        for f in sorted(os.listdir(bins)):
            p = os.path.join(bins, f)
            out.append(os.path.join(p, 'main.rs') if os.path.isdir(p) else p)
    return [r for r in out if r.endswith('.rs') and os.path.exists(r)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--max', type=int, default=3, help='largest loop allowed, in files (default 3)')
    ap.add_argument('--all', action='store_true', help='list every loop of 2 files or more')
    ap.add_argument('--warn', action='store_true', help='report only: exit 0 even with loops over --max')
    args = ap.parse_args()
    over = small = 0
    for pkg in members():
        edges, files = {}, set()
        for r in roots(pkg):
            c = Crate(r)
            edges.update(c.edges())
            files.update(c.mods.values())
        for comp in loops(files, edges):
            big = len(comp) > args.max
            over += big
            small += not big
            if not (big or args.all):
                continue
            rel = lambda f: os.path.relpath(f, os.path.join(ROOT, pkg))
            mark = f'over {args.max}' if big else 'allowed'
            print(f'{pkg}: loop of {len(comp)} files ({mark}): {", ".join(rel(f) for f in comp)}')
            for (a, b), (line, what) in sorted(edges.items()):
                if a in comp and b in comp:
                    print(f'    {rel(a)} -> {rel(b)}  (line {line}: {what})')
    print(f'{over} loop(s) of more than {args.max} files, {small} of at most {args.max}'
          + ('' if args.all or not small else ' (--all lists them)')
          + (' [report only: --warn]' if over and args.warn else ''))
    if over and not args.warn:
        sys.exit(1)

if __name__ == '__main__':
    main()
