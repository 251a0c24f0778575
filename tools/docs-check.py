#!/usr/bin/env python3
"""Checks the Markdown docs (README.md, BENCHMARKS.md, docs/*.md).

  tools/docs-check.py            relative links and #anchors resolve
  tools/docs-check.py REV        also: nothing documented in README.md at git
                                 revision REV is lost from README.md + docs/*.md
                                 (every --option, every name in the first
                                 column of a metric/setting/option table, every
                                 `code` span, every number)

Used when the reference moved from README.md to docs/ (issue 22); run it
with the pre-move revision after merging README changes made meanwhile.
"""
import glob, os, re, subprocess, sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
files = ['README.md', 'BENCHMARKS.md'] + sorted(os.path.relpath(f, root) for f in glob.glob(os.path.join(root, 'docs', '*.md')))
text = {f: open(os.path.join(root, f)).read() for f in files}


def slug(t):
    return re.sub(r'[^\w\- ]', '', t.strip().lower()).replace(' ', '-')


def anchors(src):
    seen, out, fence = {}, set(), False
    for l in src.split('\n'):
        if l.startswith('```'):
            fence = not fence
        elif not fence and re.match(r'#+ ', l):
            s = slug(l.lstrip('#'))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f'{s}-{n}')
    return out


bad = 0
for f, src in text.items():
    src = re.sub(r'```.*?```', '', src, flags=re.S)
    for target in re.findall(r'\]\(([^)\s]+)\)', src):
        if re.match(r'[a-z]+:', target):
            continue
        path, _, frag = target.partition('#')
        dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        full = os.path.join(root, dest)
        if not os.path.exists(full):
            print(f'{f}: link to missing {target}')
            bad += 1
        elif frag and dest.endswith('.md') and frag not in anchors(open(full).read()):
            print(f'{f}: no anchor #{frag} in {dest}')
            bad += 1
print(f'links: {bad} broken')

if len(sys.argv) > 1:
    old = subprocess.run(['git', '-C', root, 'show', f'{sys.argv[1]}:README.md'],
                         capture_output=True, text=True, check=True).stdout
    new = ''.join(text[f] for f in files if f != 'BENCHMARKS.md')
    names, table = set(), False
    for l in old.split('\n'):
        if l.startswith('|'):
            first = l.strip('|').split('|')[0].strip()
            if first in ('metric', 'setting', 'option', 'parameter', 'command'):
                table = True
            elif table:
                names.update(re.findall(r'`([^`]+)`', first))
        else:
            table = False
    checks = [('--options', set(re.findall(r'--[a-z][a-z0-9-]*', old))),
              ('table names (metrics, settings, options)', names),
              ('`code` spans', set(re.findall(r'`([^`\n]+)`', old))),
              ('numbers', set(re.findall(r'\b\d[\d,. ]*\d\b|\b\d\b', old)))]
    for what, found in checks:
        missing = sorted(x for x in found if x not in new)
        print(f'{what}: {len(found)} in README.md at {sys.argv[1]}, {len(missing)} missing', *missing[:40])
        bad += len(missing)
sys.exit(1 if bad else 0)
