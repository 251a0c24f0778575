#!/usr/bin/python3
"""Checks the unit tests' layout (docs/architecture.md, Tests; issue 31).

  tools/test-layout.py     lists what breaks the layout; exit 1 if anything

A module's unit tests are its child module `tests`: inline, `tests.rs` in
the module's directory, and that file's parts `tests/<part>.rs`. So under
any crate's src/ (every directory with a Cargo.toml, not under target/):
  - no `#[path = ...]` attribute (a module's file is found by its name);
  - no `*_tests.rs` file (tests beside the module they test);
  - no `tests/mod.rs` (the tests module's file is `tests.rs`).
A crate's own tests/ beside src/ (cargo's integration tests) is not looked at.
"""
import os, re, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH_ATTR = re.compile(r'#!?\s*\[\s*path\s*=')

bad = []
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
                for n, line in enumerate(f, 1):
                    if PATH_ATTR.search(line) and not line.lstrip().startswith('//'):
                        bad.append(f'{rel}:{n}: a #[path] attribute; name the file after its module')
for b in bad:
    print(b)
print(f'test layout: {len(bad)} problem{"" if len(bad) == 1 else "s"}')
sys.exit(1 if bad else 0)
