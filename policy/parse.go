package policy

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Parse reads a policy document from YAML or JSON (JSON is read as the YAML
// subset it is), strictly: unknown fields, duplicate keys and wrong types are
// errors naming the line and field. The document is validated before it is
// returned.
func Parse(data []byte) (*Document, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, Errors{syntaxError(err)}
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		return nil, Errors{{Msg: "empty document: want a policy with version, regions, limits and tiers"}}
	}
	lines := map[string]int{}
	index(root.Content[0], "", lines)

	var doc Document
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, decodeErrors(err, lines)
	}
	if err := doc.validate(lines); err != nil {
		return nil, err
	}
	return &doc, nil
}

// index records the line of every field path under n.
func index(n *yaml.Node, path string, lines map[string]int) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if _, dup := lines[p]; !dup {
				lines[p] = k.Line
			}
			index(v, p, lines)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			lines[p] = v.Line
			index(v, p, lines)
		}
	case yaml.DocumentNode, yaml.AliasNode:
		for _, c := range n.Content {
			index(c, path, lines)
		}
	}
}

var lineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

func syntaxError(err error) *FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		l, _ := strconv.Atoi(m[1])
		return &FieldError{Line: l, Msg: "syntax: " + m[2]}
	}
	return &FieldError{Msg: "syntax: " + msg}
}

// decodeErrors turns yaml's type errors into field errors, naming the field
// found on the reported line.
func decodeErrors(err error, lines map[string]int) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return Errors{syntaxError(err)}
	}
	byLine := map[int]string{}
	for p, l := range lines {
		if q, ok := byLine[l]; !ok || len(p) > len(q) {
			byLine[l] = p
		}
	}
	var out Errors
	for _, e := range te.Errors {
		fe := &FieldError{Msg: e}
		if m := lineRE.FindStringSubmatch(e); m != nil {
			fe.Line, _ = strconv.Atoi(m[1])
			fe.Path = byLine[fe.Line]
			fe.Msg = strings.ReplaceAll(m[2], "policy.", "")
		}
		out = append(out, fe)
	}
	return out
}
