package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// yaml.v3 reports type errors and unknown keys as lines such as
//
//	line 7: field token_fil not found in type config.Auth
//	line 9: cannot unmarshal !!str `lots` into int
//
// which name Go types and no path. decodeErrors rewrites each one to the
// form Validate uses, "clusters[0].auth: unknown key \"token_fil\" (line 7)",
// by finding the node yaml.v3 complained about in the parsed document. When
// the node cannot be pinned down (two candidates on one line of flow
// style), the path is left out but the line number stays; a message it does
// not recognise is kept as yaml.v3 wrote it.

var (
	reTypeErrLine  = regexp.MustCompile(`(?s)^line (\d+)(?: column (\d+))?: (.*)$`)
	reUnknownField = regexp.MustCompile(`(?s)^field (.*) not found in type \S+$`)
	reFieldSet     = regexp.MustCompile(`(?s)^field (.*) already set in type \S+$`)
	reKeyDefined   = regexp.MustCompile(`(?s)^mapping key (".*") already defined at line (\d+)$`)
	reCannot       = regexp.MustCompile("(?s)^cannot unmarshal (\\S+)(?: `(.*)`)? into (.+)$")
)

// posError is how this package's own YAML unmarshalers report a bad value:
// a *yaml.TypeError, so decoding goes on and collects every error, with the
// node's exact position, so decodeErrors can find its path.
func posError(n *yaml.Node, msg string) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d column %d: %s", n.Line, n.Column, msg)}}
}

// decodeErrors turns yaml.v3's type errors into one error per problem.
func decodeErrors(doc *yaml.Node, te *yaml.TypeError) error {
	idx := newPathIndex(doc)
	errs := make([]error, 0, len(te.Errors))
	for _, s := range te.Errors {
		// One error per line, whatever a value held.
		errs = append(errs, errors.New(strings.ReplaceAll(idx.rewrite(s), "\n", `\n`)))
	}
	return errors.Join(errs...)
}

type pathedNode struct {
	path string
	node *yaml.Node
}

type pathedKey struct {
	parent string // path of the mapping holding the key
	key    *yaml.Node
}

// pathIndex finds the path of a node from its position.
type pathIndex struct {
	values map[int][]pathedNode // value nodes, by line
	keys   map[int][]pathedKey  // mapping keys, by line
}

func newPathIndex(doc *yaml.Node) *pathIndex {
	idx := &pathIndex{values: map[int][]pathedNode{}, keys: map[int][]pathedKey{}}
	idx.walk(doc, "")
	return idx
}

func (idx *pathIndex) walk(n *yaml.Node, path string) {
	if n == nil {
		return
	}
	if n.Kind != yaml.DocumentNode {
		idx.values[n.Line] = append(idx.values[n.Line], pathedNode{path, n})
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			idx.walk(c, path)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			idx.walk(c, fmt.Sprintf("%s[%d]", path, i))
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			idx.keys[k.Line] = append(idx.keys[k.Line], pathedKey{path, k})
			child := k.Value
			if path != "" {
				child = path + "." + k.Value
			}
			idx.walk(v, child)
		}
		// Aliases are not followed: the alias itself is what sits at that
		// path, and following them could loop.
	}
}

// key returns the path of the mapping holding key name on line, if exactly
// one mapping on that line has such a key.
func (idx *pathIndex) key(line int, name string) (string, bool) {
	var found []string
	for _, k := range idx.keys[line] {
		if k.key.Kind == yaml.ScalarNode && k.key.Value == name {
			found = append(found, k.parent)
		}
	}
	if len(found) != 1 {
		return "", false
	}
	return found[0], true
}

func (idx *pathIndex) at(line, col int) (pathedNode, bool) {
	for _, v := range idx.values[line] {
		if v.node.Column == col {
			return v, true
		}
	}
	return pathedNode{}, false
}

// rewrite turns one yaml.v3 type error into "path: problem (line N)".
func (idx *pathIndex) rewrite(s string) string {
	m := reTypeErrLine.FindStringSubmatch(s)
	if m == nil {
		return s
	}
	line, _ := strconv.Atoi(m[1])
	msg := m[3]
	at := fmt.Sprintf("(line %d)", line)
	where := func(path, what string) string {
		if path == "" {
			return what + " " + at
		}
		return path + ": " + what + " " + at
	}

	if m[2] != "" { // posError: exact position known
		col, _ := strconv.Atoi(m[2])
		v, _ := idx.at(line, col)
		return where(v.path, msg)
	}
	if f := reUnknownField.FindStringSubmatch(msg); f != nil {
		p, _ := idx.key(line, f[1])
		return where(p, fmt.Sprintf("unknown key %q", f[1]))
	}
	if f := reFieldSet.FindStringSubmatch(msg); f != nil {
		p, _ := idx.key(line, f[1])
		return where(p, fmt.Sprintf("key %q appears more than once", f[1]))
	}
	if f := reKeyDefined.FindStringSubmatch(msg); f != nil {
		name, err := strconv.Unquote(f[1])
		if err != nil {
			return s
		}
		p, _ := idx.key(line, name)
		at = fmt.Sprintf("(first on line %s, again on line %d)", f[2], line)
		return where(p, fmt.Sprintf("key %q appears more than once", name))
	}
	if f := reCannot.FindStringSubmatch(msg); f != nil {
		tag, shown, into := f[1], f[2], f[3]
		v, ok := idx.cannot(line, tag, shown)
		got := describeTag(tag)
		if ok && v.node.Kind == yaml.ScalarNode {
			got += " " + strconv.Quote(v.node.Value)
		} else if shown != "" {
			got += " " + strconv.Quote(shown)
		}
		return where(v.path, fmt.Sprintf("expected %s, got %s", describeGoType(into), got))
	}
	return s
}

// cannot finds the node a "cannot unmarshal" error is about: on the line,
// of the kind the tag implies and, for scalars, with the value shown (which
// yaml.v3 cuts to 7 bytes and "..." when longer than 10).
func (idx *pathIndex) cannot(line int, tag, shown string) (pathedNode, bool) {
	var found []pathedNode
	for _, v := range idx.values[line] {
		n := v.node
		switch tag {
		case "!!map":
			if n.Kind != yaml.MappingNode {
				continue
			}
		case "!!seq":
			if n.Kind != yaml.SequenceNode {
				continue
			}
		default:
			if n.Kind != yaml.ScalarNode {
				continue
			}
			if n.Value != shown && !(len(n.Value) > 10 && strings.HasSuffix(shown, "...") && strings.HasPrefix(n.Value, strings.TrimSuffix(shown, "..."))) {
				continue
			}
		}
		found = append(found, v)
	}
	if len(found) != 1 {
		return pathedNode{}, false
	}
	return found[0], true
}

func describeTag(tag string) string {
	switch tag {
	case "!!map":
		return "a mapping"
	case "!!seq":
		return "a list"
	case "!!str":
		return "a string"
	case "!!int":
		return "an integer"
	case "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "null"
	}
	return tag
}

func describeGoType(t string) string {
	switch t {
	case "string":
		return "a string"
	case "int":
		return "an integer"
	case "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "[]string":
		return "a list of strings"
	}
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "config."):
		return "a mapping"
	}
	return t
}

func describeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return "a scalar"
}
