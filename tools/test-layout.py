#!/usr/bin/python3
"""Checks the unit tests' layout (docs/architecture.md, Tests; issue 31).

  tools/test-layout.py     lists what breaks the layout; exit 1 if anything

A module's unit tests are its child module `tests`: inline, `tests.rs` in
the module's directory, and that file's parts `tests/<part>.rs`. So under
any crate's src/ (every directory with a Cargo.toml, not under target/):
  - no `#[path = ...]` attribute (a module's file is found by its name);
  - no `*_tests.rs` file (tests beside the module they test);
  - no `tests/mod.rs` (the tests module's file is `tests.rs`);
  - no `#[cfg(test)]` module other than `tests` outside the tests modules
    (`#[cfg(test)] mod bounds;` beside `mod tests;`): make it a part;
  - no inline `mod tests { ... }` of more than 80 lines between its braces
    (longer ones become `tests.rs`);
  - no `tests.rs` or test part (a file under a `tests/` directory of src/)
    of more than 450 lines (split it further by subject).
A crate's own tests/ beside src/ (cargo's integration tests) is not looked at.
"""
import os, re, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH_ATTR = re.compile(r'#!?\s*\[\s*path\s*=')
# An inline tests module as rustfmt writes it; it ends at the first line
# that is its indentation and `}`.
INLINE_TESTS = re.compile(r'^(\s*)(?:pub(?:\([^)]*\))?\s+)?mod tests\s*\{\s*$')
CFG_TEST = re.compile(r'^\s*#\[cfg\(test\)\]\s*$')
OTHER_MOD = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?mod (\w+)\s*[;{]')
MAX_INLINE = 80
MAX_TEST_FILE = 450

bad = []


def size(rel, problem):
    bad.append(f'{rel}{problem}')


for top, dirs, files in os.walk(ROOT):
    dirs[:] = sorted(d for d in dirs if d != 'target' and not d.startswith('.'))
    if 'Cargo.toml' not in files or not os.path.isdir(os.path.join(top, 'src')):
        continue
    for d, subdirs, names in os.walk(os.path.join(top, 'src')):
        subdirs.sort()
        for name in sorted(n for n in names if n.endswith('.rs')):
            path = os.path.join(d, name)
            rel = os.path.relpath(path, ROOT)
            if name.endswith('_tests.rs'):
                bad.append(f'{rel}: a *_tests.rs file; make it the `tests` module of the module it tests')
            if name == 'mod.rs' and os.path.basename(d) == 'tests':
                bad.append(f'{rel}: the tests module\'s file is tests.rs, beside its tests/ directory')
            with open(path, encoding='utf-8') as f:
                lines = f.read().splitlines()
            for n, line in enumerate(lines, 1):
                if PATH_ATTR.search(line) and not line.lstrip().startswith('//'):
                    bad.append(f'{rel}:{n}: a #[path] attribute; name the file after its module')
            in_src = os.path.relpath(path, os.path.join(top, 'src')).split(os.sep)
            test_file = name == 'tests.rs' or 'tests' in in_src[:-1]
            for n, line in enumerate(lines):
                if test_file or not CFG_TEST.match(line):
                    continue
                k = n + 1
                while k < len(lines) and lines[k].lstrip().startswith('#['):
                    k += 1
                m = OTHER_MOD.match(lines[k]) if k < len(lines) else None
                if m and m.group(1) != 'tests':
                    bad.append(f'{rel}:{k + 1}: a test module `{m.group(1)}` beside `tests`; make it a part of the tests module')
            if test_file and len(lines) > MAX_TEST_FILE:
                size(rel, f': {len(lines)} lines of tests, over {MAX_TEST_FILE}; split it by subject into {rel[:-3]}/<part>.rs')
            for n, line in enumerate(lines):
                m = INLINE_TESTS.match(line)
                if not m:
                    continue
                end = next((k for k in range(n + 1, len(lines)) if lines[k] == m.group(1) + '}'), None)
                if end is None:
                    bad.append(f'{rel}:{n + 1}: an inline `mod tests {{` whose end was not found (not rustfmt-formatted?)')
                elif end - n - 1 > MAX_INLINE:
                    size(f'{rel}:{n + 1}', f': an inline `mod tests` of {end - n - 1} lines, over {MAX_INLINE}; make it the file tests.rs')
for b in bad:
    print(b)
print(f'test layout: {len(bad)} problem{"" if len(bad) == 1 else "s"}')
sys.exit(1 if bad else 0)
