package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// node is a parsed JSON value that keeps the order of object keys (the
// order of a schema's properties is the order of the output's keys).
type node struct {
	kind byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	keys []string
	vals []*node
	arr  []*node
	str  string
	num  json.Number
	b    bool
}

func (n *node) get(k string) *node {
	if n == nil || n.kind != 'o' {
		return nil
	}
	for i, key := range n.keys {
		if key == k {
			return n.vals[i]
		}
	}
	return nil
}

// parseJSON reads one JSON value, bounding its nesting depth.
func parseJSON(data []byte, maxDepth int) (*node, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	n, err := parseValue(d, 0, maxDepth)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after the schema")
	}
	return n, nil
}

func parseValue(d *json.Decoder, depth, maxDepth int) (*node, error) {
	if depth > maxDepth {
		return nil, errLimit("schema_too_deep", "the schema nests deeper than %d levels", maxDepth)
	}
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &node{kind: 'o'}
			// Duplicates are found by a scan while the object is small
			// and by a set past that: scanning, a 9,000-key object (a
			// 64 KiB schema's properties) was 40 million comparisons.
			var seen map[string]bool
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				dup := false
				if seen == nil {
					dup = slices.Contains(n.keys, k)
					if len(n.keys) >= 16 {
						seen = map[string]bool{}
						for _, old := range n.keys {
							seen[old] = true
						}
					}
				} else {
					dup = seen[k]
				}
				if dup {
					return nil, fmt.Errorf("duplicate key %q", k)
				}
				if seen != nil {
					seen[k] = true
				}
				v, err := parseValue(d, depth+1, maxDepth)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k)
				n.vals = append(n.vals, v)
			}
			_, err := d.Token()
			return n, err
		case '[':
			n := &node{kind: 'a'}
			for d.More() {
				v, err := parseValue(d, depth+1, maxDepth)
				if err != nil {
					return nil, err
				}
				n.arr = append(n.arr, v)
			}
			_, err := d.Token()
			return n, err
		}
	case string:
		return &node{kind: 's', str: t}, nil
	case json.Number:
		return &node{kind: 'n', num: t}, nil
	case bool:
		return &node{kind: 'b', b: t}, nil
	case nil:
		return &node{kind: 'z'}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// encode writes n as compact JSON, keys in their order.
func (n *node) encode(b *bytes.Buffer) {
	switch n.kind {
	case 'o':
		b.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			n.vals[i].encode(b)
		}
		b.WriteByte('}')
	case 'a':
		b.WriteByte('[')
		for i, v := range n.arr {
			if i > 0 {
				b.WriteByte(',')
			}
			v.encode(b)
		}
		b.WriteByte(']')
	case 's':
		writeString(b, n.str)
	case 'n':
		b.WriteString(n.num.String())
	case 'b':
		if n.b {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	default:
		b.WriteString("null")
	}
}

// writeString writes s as a JSON string without HTML escaping.
func writeString(b *bytes.Buffer, s string) {
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s)
	b.Truncate(b.Len() - 1) // Encode's newline
}
