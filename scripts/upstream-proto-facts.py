#!/usr/bin/env python3
"""Writes deploy/devstack/testdata/upstream-fields.tsv from a clone of
upstream's protos (github.com/cloudforet-io/api): for every operation of
docs/spec/operations.tsv, the service, method, request message and its
fields with their kinds, then the core query messages. Names only.

  python3 scripts/upstream-proto-facts.py <api clone> docs/spec/operations.tsv > deploy/devstack/testdata/upstream-fields.tsv
"""
import re, subprocess, sys

REPO = sys.argv[1]
OPS = sys.argv[2]

def git(*a):
    return subprocess.run(["git", "-C", REPO, *a], capture_output=True, text=True).stdout

SCALARS = {"string","bool","int32","int64","uint32","uint64","sint32","sint64","fixed32","fixed64","sfixed32","sfixed64","double","float","bytes"}

def strip(src):
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    src = re.sub(r"//[^\n]*", " ", src)
    return src

def tokens(src):
    return re.findall(r'"[^"]*"|[A-Za-z_][\w.]*|\d+|[{}()<>;=,\[\]]|\S', src)

class File:
    def __init__(self, text):
        self.pkg = ""
        self.messages = {}   # full local name (A.B) -> list of (label, type, name)
        self.enums = set()
        self.services = {}   # name -> {rpc: (in, out, post)}
        t = tokens(strip(text))
        self.t, self.i = t, 0
        self.parse_top()
    def nxt(self):
        tok = self.t[self.i]; self.i += 1; return tok
    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else None
    def skip_block(self):
        depth = 0
        while True:
            tok = self.nxt()
            if tok == "{": depth += 1
            elif tok == "}":
                depth -= 1
                if depth == 0: return
    def skip_stmt(self):
        while self.nxt() != ";": pass
    def parse_top(self):
        while self.peek() is not None:
            tok = self.nxt()
            if tok == "package":
                self.pkg = self.nxt(); self.skip_stmt()
            elif tok == "message":
                self.parse_message(self.nxt(), "")
            elif tok == "enum":
                self.enums.add(self.nxt()); self.i -= 0; self.skip_block_from_here()
            elif tok == "service":
                self.parse_service(self.nxt())
            elif tok in ("syntax", "option", "import"):
                self.skip_stmt()
    def skip_block_from_here(self):
        # at "{"
        self.skip_block()
    def parse_message(self, name, prefix):
        full = prefix + name
        fields = []
        self.messages[full] = fields
        assert self.nxt() == "{"
        while True:
            tok = self.nxt()
            if tok == "}": return
            if tok == "message":
                self.parse_message(self.nxt(), full + ".")
            elif tok == "enum":
                self.enums.add(full + "." + self.nxt()); self.skip_block()
            elif tok == "oneof":
                self.nxt(); assert self.nxt() == "{"
                while self.peek() != "}":
                    if self.peek() == "option": self.skip_stmt(); continue
                    fields.append(self.parse_field(None))
                self.nxt()
            elif tok in ("option", "reserved", "extensions"):
                self.skip_stmt()
            elif tok == ";":
                continue
            else:
                self.i -= 1
                fields.append(self.parse_field(None))
    def parse_field(self, _):
        label = ""
        tok = self.nxt()
        if tok in ("repeated", "optional"):
            label, tok = tok, self.nxt()
        if tok == "map":
            depth = 0
            typ = "map"
            while True:
                x = self.nxt()
                if x == "<": depth += 1
                elif x == ">":
                    depth -= 1
                    if depth == 0: break
        else:
            typ = tok
        name = self.nxt()
        self.skip_stmt()
        return (label, typ, name)
    def parse_service(self, name):
        rpcs = {}
        self.services[name] = rpcs
        assert self.nxt() == "{"
        while True:
            tok = self.nxt()
            if tok == "}": return
            if tok == "option": self.skip_stmt(); continue
            if tok != "rpc": continue
            m = self.nxt(); assert self.nxt() == "("
            inn = self.nxt()
            if inn == "stream": inn = self.nxt()
            assert self.nxt() == ")"; assert self.nxt() == "returns"; assert self.nxt() == "("
            out = self.nxt()
            if out == "stream": out = self.nxt()
            self.nxt()
            post = ""
            if self.peek() == "{":
                start = self.i
                self.skip_block()
                body = self.t[start:self.i]
                for j, x in enumerate(body):
                    if x in ("post", "get") and j + 2 < len(body) and body[j+1] == ":":
                        post = body[j+2].strip('"')
            else:
                self.skip_stmt() if self.peek() == ";" else None
            rpcs[m] = (inn, out, post)

def files_at(commit):
    names = [n for n in git("ls-tree", "-r", "--name-only", commit, "proto/spaceone/api").split("\n") if n.endswith(".proto")]
    return names

cache = {}
def parsed(commit, path):
    key = (commit, path)
    if key not in cache:
        try:
            cache[key] = File(git("show", f"{commit}:{path}"))
        except Exception as e:
            print("parse", commit, path, e, file=sys.stderr)
            cache[key] = None
    return cache[key]

def find_in(commit, paths, post):
    for p in paths:
        f = parsed(commit, p)
        if f is None: continue
        for s, rpcs in f.services.items():
            for m, (inn, out, pp) in rpcs.items():
                if pp == post:
                    return f, p, s, m, inn, out
    # By name: a route without an HTTP rule, or one whose rule names another path.
    parts = post.strip("/").split("/")
    svc = "".join("API" if w == "api" else w[:1].upper() + w[1:] for w in parts[2].split("-"))
    meth = parts[3].replace("-", "_")
    for p in paths:
        f = parsed(commit, p)
        if f is None: continue
        for s, rpcs in f.services.items():
            if s.lower() == svc.lower() and meth in rpcs:
                inn, out, pp = rpcs[meth]
                return f, p, s, meth, inn, out
    return None

def kind(f, pkgfiles, msg, typ, label):
    if typ == "map":
        k = "map"
    elif typ in SCALARS:
        k = typ
    elif typ.startswith("google.protobuf.") or typ.startswith("spaceone."):
        k = typ
        if typ.startswith(f.pkg + "."):
            k = resolve_local(pkgfiles, msg, typ[len(f.pkg)+1:], f.pkg)
    else:
        k = resolve_local(pkgfiles, msg, typ, f.pkg)
    return (label + " " if label == "repeated" else "") + k

def resolve_local(pkgfiles, msg, typ, pkg):
    scopes = msg.split(".")
    for n in range(len(scopes), -1, -1):
        cand = ".".join(scopes[:n] + [typ])
        for pf in pkgfiles:
            if cand in pf.enums: return "enum"
            if cand in pf.messages: return "message"
    return "unknown:" + typ

head = git("rev-parse", "HEAD").strip()
head_paths = files_at(head)
ops = [l.split("\t")[0] for l in open(OPS).read().strip().split("\n")[1:]]
out = []
for path in ops:
    parts = path.strip("/").split("/")
    d = f"proto/spaceone/api/{parts[0].replace('-', '_')}/{parts[1]}/"
    commit = head
    r = find_in(head, [p for p in head_paths if p.startswith(d)], path)
    if r is None:
        # The newest commit that still had the route: the one before its removal.
        shas = git("log", "--format=%H", "-S", f'"{path}"', "--", d).split()
        r = None
        for sha in shas:
            for c in (sha + "^", sha):
                c = git("rev-parse", c).strip()
                rr = find_in(c, [p for p in files_at(c) if p.startswith(d)], path)
                if rr:
                    r, commit = rr, c
                    break
            if r: break
    if r is None:
        svc = "".join("API" if w == "api" else w[:1].upper() + w[1:] for w in parts[2].split("-"))
        shas = git("log", "--format=%H", "-S", f"service {svc} {{", "--", d).split()
        for sha in shas:
            for c in (sha + "^", sha):
                c = git("rev-parse", c).strip()
                rr = find_in(c, [p for p in files_at(c) if p.startswith(d)], path)
                if rr:
                    r, commit = rr, c
                    break
            if r: break
    if r is None:
        out.append((path, "-", "-", "-", "-", "-", "not found"))
        continue
    f, p, svc, m, inn, outm = r
    pkgfiles = [parsed(commit, q) for q in files_at(commit) if q.startswith(p.rsplit("/", 1)[0] + "/") and q.count("/") == p.count("/")] if commit != head else [parsed(commit, q) for q in head_paths if q.rsplit("/",1)[0] == p.rsplit("/",1)[0]]
    pkgfiles = [x for x in pkgfiles if x]
    src = f"{commit[:8]}:{p.removeprefix('proto/')}"
    req = inn
    fields = None
    if inn.startswith("google.protobuf."):
        out.append((path, f.pkg + "." + svc, m, inn, "-", "-", src)); continue
    for pf in pkgfiles:
        if inn in pf.messages:
            fields, owner = pf.messages[inn], pf; break
    if fields is None:
        out.append((path, f.pkg + "." + svc, m, inn, "-", "unresolved", src)); continue
    if not fields:
        out.append((path, f.pkg + "." + svc, m, inn, "-", "-", src))
    for label, typ, name in fields:
        out.append((path, f.pkg + "." + svc, m, inn, name, kind(owner, pkgfiles, inn, typ, label), src))
print("# Facts read from upstream's protos (github.com/cloudforet-io/api, proto/, commit %s" % head[:8])
print("# and, for a route upstream has since removed, the last commit that had it, named per row).")
print("# A list of names and kinds, not upstream's text: for each operation of docs/spec/operations.tsv,")
print("# upstream's full service name, method and request message, and each field of that message")
print("# with its kind (a scalar, enum, map, message for one of the package's own, or a well-known or")
print("# core message by full name; `repeated ` before a list). Then the fields of the core query")
print("# messages (spaceone.api.core.v1 and v2 query.proto). Read by TestGRPCAsCfctl (grpc_conformance_test.go).")
print("path\tservice\tmethod\trequest\tfield\tkind\tsource")
for row in out:
    print("\t".join(row))
for ver in ("v1", "v2"):
    p = f"proto/spaceone/api/core/{ver}/query.proto"
    f = parsed(head, p)
    for mname, flds in f.messages.items():
        for label, typ, name in flds:
            if typ in SCALARS or typ == "map" or typ.startswith("google.protobuf."):
                k = typ
            elif resolve_local([f], mname, typ, f.pkg) == "enum":
                k = "enum"
            else:
                k = f.pkg + "." + typ
            k = ("repeated " if label == "repeated" else "") + k
            print("\t".join(("core", "-", "-", f.pkg + "." + mname, name, k, head[:8] + ":" + p.removeprefix("proto/"))))
