// Package cmdgen generates package wire's command codec from its table,
// replicator/wire/commands.txt: the struct of every command and
// sub-message, its Type, appendTo and decode methods, the CommandType
// constants, typeNames and newBody. It exists so that a command's field
// numbers, omission rules, defaults and required fields are written once,
// in one line per field, instead of twice (an encoder and a decoder that
// must agree) in some 35 hand-written triples. commands.txt describes the
// table's syntax; gen.go beside it runs Generate for go generate.
package cmdgen

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// msgType is one type of the table: a command (a BaseCommand body) or a
// sub-message.
type msgType struct {
	line      int
	doc       []string
	name      string
	command   bool
	typeConst string // commands: the CommandType constant
	num       int    // commands: the CommandType number
	wireName  string // commands: the name CommandType.String returns
	proto     string // the protocol's message name, for decoding errors
	manual    bool   // dispatch only: the type and its codec are hand-written
	value     bool   // appendTo has a value receiver
	fields    []*fieldDef
}

// fieldDef is one field of a type.
type fieldDef struct {
	line    int
	doc     []string
	comment string // the line comment
	name    string // "_": on the wire only
	goType  string
	num     int    // 0: in Go only
	kind    string // the encoding; "" in Go only
	req     bool
	not     bool
	when    string
	has     string
	def     string
	as      string
	konst   string
}

func (f *fieldDef) wireOnly() bool { return f.name == "_" }
func (f *fieldDef) goOnly() bool   { return f.num == 0 }

// elem is a message field's type without * or [].
func (f *fieldDef) elem() string { return strings.TrimLeft(f.goType, "*[]") }

func (f *fieldDef) repeated() bool { return strings.HasPrefix(f.goType, "[]") && f.kind == "message" }
func (f *fieldDef) pointer() bool  { return strings.HasPrefix(f.goType, "*") }

var (
	identRE   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)
	wireRE    = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	protoRE   = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	typeRE    = regexp.MustCompile(`^(\*|\[\])?[A-Za-z][A-Za-z0-9]*$`)
	selfRE    = regexp.MustCompile(`^(==|!=|>=|<=|>|<)(.+)$`)
	otherRE   = regexp.MustCompile(`^([A-Z][A-Za-z0-9]*)(?:(==|!=|>=|<=|>|<)(.+))?$`)
	constRE   = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9]*)=([0-9]+)$`)
	scalarFor = map[string]string{ // kind: its Go type (enum and message: named types)
		"uint64": "uint64", "uint32": "uint32", "int64": "int64", "int32": "int32",
		"bool": "bool", "string": "string", "bytes": "[]byte",
	}
)

// parse reads the table.
func parse(src []byte, name string) ([]*msgType, error) {
	var (
		types []*msgType
		doc   []string
		cur   *msgType
		errs  []string
	)
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s:%d: %s", name, line, fmt.Sprintf(format, args...)))
	}
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		trimmed := strings.TrimSpace(text)
		switch {
		case trimmed == "":
			if len(doc) > 0 {
				fail(n, "a doc comment must be followed by what it documents")
				doc = nil
			}
			continue
		case strings.HasPrefix(trimmed, "#"):
			continue
		case strings.HasPrefix(trimmed, "//"):
			doc = append(doc, trimmed)
			continue
		}
		indented := text[0] == ' ' || text[0] == '\t'
		if !indented {
			t, err := parseType(n, trimmed)
			if err != nil {
				fail(n, "%v", err)
				cur = nil
			} else {
				t.doc = doc
				types = append(types, t)
				cur = t
			}
			doc = nil
			continue
		}
		if cur == nil {
			fail(n, "a field outside a type")
			doc = nil
			continue
		}
		f, err := parseField(n, trimmed)
		if err != nil {
			fail(n, "%v", err)
		} else {
			f.doc = doc
			cur.fields = append(cur.fields, f)
		}
		doc = nil
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(doc) > 0 {
		errs = append(errs, fmt.Sprintf("%s: a doc comment at the end documents nothing", name))
	}
	if len(errs) == 0 {
		errs = check(types, name)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return types, nil
}

// parseType reads a type's line:
//
//	command GoName TypeConst=N WIRE_NAME ProtoMessage
//	command GoName TypeConst=N WIRE_NAME manual
//	message GoName ProtoMessage [value]
func parseType(line int, text string) (*msgType, error) {
	w := strings.Fields(text)
	t := &msgType{line: line}
	switch {
	case w[0] == "command" && len(w) == 5:
		t.command, t.name = true, w[1]
		m := constRE.FindStringSubmatch(w[2])
		if m == nil {
			return nil, fmt.Errorf("%q is not TypeConst=N", w[2])
		}
		t.typeConst = m[1]
		t.num, _ = strconv.Atoi(m[2])
		t.wireName = w[3]
		if !wireRE.MatchString(t.wireName) {
			return nil, fmt.Errorf("%q is not a command name (upper case)", t.wireName)
		}
		if w[4] == "manual" {
			t.manual = true
		} else {
			t.proto = w[4]
		}
	case w[0] == "message" && (len(w) == 3 || len(w) == 4):
		t.name, t.proto = w[1], w[2]
		if len(w) == 4 {
			if w[3] != "value" {
				return nil, fmt.Errorf("unknown message option %q", w[3])
			}
			t.value = true
		}
	default:
		return nil, fmt.Errorf("want \"command GoName TypeConst=N WIRE_NAME ProtoMessage|manual\" or \"message GoName ProtoMessage [value]\", have %q", text)
	}
	if !identRE.MatchString(t.name) {
		return nil, fmt.Errorf("%q is not a Go name", t.name)
	}
	if t.proto != "" && !identRE.MatchString(t.proto) {
		return nil, fmt.Errorf("%q is not a message name", t.proto)
	}
	return t, nil
}

// parseField reads a field's line: GoName GoType N kind [attribute...]
// [// comment], or GoName GoType - for a field in Go only.
func parseField(line int, text string) (*fieldDef, error) {
	f := &fieldDef{line: line}
	if i := strings.Index(text, "//"); i >= 0 {
		f.comment = strings.TrimSpace(text[i:])
		text = strings.TrimSpace(text[:i])
	}
	w := strings.Fields(text)
	if len(w) < 3 {
		return nil, fmt.Errorf("want \"GoName GoType N kind [attribute...]\", have %q", text)
	}
	f.name, f.goType = w[0], w[1]
	if f.name != "_" && !identRE.MatchString(f.name) {
		return nil, fmt.Errorf("%q is not a Go name", f.name)
	}
	if !typeRE.MatchString(f.goType) {
		return nil, fmt.Errorf("%s: %q is not a Go type this table knows", f.name, f.goType)
	}
	if w[2] == "-" {
		if len(w) > 3 || f.name == "_" {
			return nil, fmt.Errorf("%s: a field in Go only has no kind nor attributes", f.name)
		}
		return f, nil
	}
	n, err := strconv.Atoi(w[2])
	if err != nil || n < 1 || n > 1<<29-1 {
		return nil, fmt.Errorf("%s: field number %q", f.name, w[2])
	}
	f.num = n
	if len(w) < 4 {
		return nil, fmt.Errorf("%s: no kind", f.name)
	}
	f.kind = w[3]
	for _, a := range w[4:] {
		key, val, hasVal := strings.Cut(a, "=")
		var dst *string
		switch key {
		case "req":
			f.req = true
		case "not":
			f.not = true
		case "when":
			dst = &f.when
		case "has":
			dst = &f.has
		case "default":
			dst = &f.def
		case "as":
			dst = &f.as
		case "const":
			dst = &f.konst
		default:
			return nil, fmt.Errorf("%s: unknown attribute %q", f.name, a)
		}
		if (dst != nil) != hasVal || (hasVal && val == "") {
			return nil, fmt.Errorf("%s: attribute %q: want req, not or key=value", f.name, a)
		}
		if dst != nil {
			if *dst != "" {
				return nil, fmt.Errorf("%s: attribute %s twice", f.name, key)
			}
			*dst = val
		}
	}
	return f, nil
}

// check validates the table as a whole: names, numbers, and that every
// field's kind, type and attributes go together.
func check(types []*msgType, name string) []string {
	var errs []string
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s:%d: %s", name, line, fmt.Sprintf(format, args...)))
	}
	names, consts, wires, nums := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[int]bool{}
	for _, t := range types {
		if names[t.name] {
			fail(t.line, "type %s twice", t.name)
		}
		names[t.name] = true
		if t.command {
			if consts[t.typeConst] || wires[t.wireName] || nums[t.num] {
				fail(t.line, "%s: command constant, name or number used twice", t.name)
			}
			consts[t.typeConst], wires[t.wireName], nums[t.num] = true, true, true
		}
		if t.manual {
			if len(t.fields) > 0 || len(t.doc) > 0 {
				fail(t.line, "%s: a manual command has no fields nor doc here (they are in its hand-written file)", t.name)
			}
			continue
		}
		if len(t.doc) == 0 {
			fail(t.line, "%s: no doc comment", t.name)
		}
		byName, byNum := map[string]*fieldDef{}, map[int]bool{}
		for _, f := range t.fields {
			if f.name != "_" {
				if byName[f.name] != nil {
					fail(f.line, "%s.%s twice", t.name, f.name)
				}
				byName[f.name] = f
			}
			if f.num != 0 {
				if byNum[f.num] {
					fail(f.line, "%s: field number %d twice", t.name, f.num)
				}
				byNum[f.num] = true
			}
		}
		for _, f := range t.fields {
			for _, e := range checkField(t, f, byName) {
				fail(f.line, "%s.%s: %s", t.name, f.name, e)
			}
		}
	}
	return errs
}

func checkField(t *msgType, f *fieldDef, byName map[string]*fieldDef) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if f.goOnly() {
		return nil
	}
	switch f.kind {
	case "enum":
		if !identRE.MatchString(f.goType) || scalarFor[f.goType] != "" {
			bad("enum wants a named integer type, not %s", f.goType)
		}
	case "message":
		if !typeRE.MatchString(f.goType) || scalarFor[f.elem()] != "" {
			bad("message wants a message type T, *T or []T, not %s", f.goType)
		}
		if f.as == "" {
			bad("a message field needs as=name (its name in decoding errors)")
		} else if !protoRE.MatchString(f.as) {
			bad("as=%s: want a lower_case name", f.as)
		}
		if f.pointer() && f.when != "set" {
			bad("a pointer is sent only when=set")
		}
		if f.repeated() && (f.when != "" || f.has != "" || f.req || f.def != "") {
			bad("a repeated field is sent once per element: no when, has, req or default")
		}
	default:
		want, ok := scalarFor[f.kind]
		if !ok {
			bad("unknown kind %q", f.kind)
		} else if want != f.goType {
			bad("kind %s wants Go type %s, not %s", f.kind, want, f.goType)
		}
	}
	if f.kind != "message" && f.as != "" {
		bad("as= is for message fields")
	}
	if f.not && f.kind != "bool" {
		bad("not is for bool fields")
	}
	if f.req && (f.when != "" || f.has != "") {
		bad("a required field is always sent: no when or has")
	}
	if f.req && f.num >= 64 {
		bad("required fields are numbered below 64 (forEachField's bitmask)")
	}
	if f.when != "" && f.has != "" {
		bad("when and has together")
	}
	if f.wireOnly() != (f.konst != "") {
		bad("const= goes with the name _, a field on the wire only")
	}
	if f.wireOnly() && (f.req || f.has != "" || f.def != "" || f.not) {
		bad("a field on the wire only is never decoded: no req, has, default or not")
	}
	if f.has != "" {
		if g := byName[f.has]; g == nil || !g.goOnly() || g.goType != "bool" {
			bad("has=%s wants a bool field in Go only", f.has)
		}
	}
	if f.when != "" && f.when != "set" {
		if !selfRE.MatchString(f.when) {
			m := otherRE.FindStringSubmatch(f.when)
			switch {
			case m == nil:
				bad("when=%s: want set, >0, >=0, >1, a bool field, or Field==X", f.when)
			case byName[m[1]] == nil || m[1] == f.name:
				bad("when=%s: no other field %s", f.when, m[1])
			case m[2] == "" && byName[m[1]].goType != "bool":
				bad("when=%s: %s is not a bool", f.when, m[1])
			}
		} else if f.wireOnly() {
			bad("when=%s compares a field on the wire only", f.when)
		}
	}
	if f.when == "set" && f.wireOnly() {
		bad("when=set on a field on the wire only")
	}
	return errs
}
