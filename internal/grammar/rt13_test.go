package grammar

import "testing"

// An anyOf of a literal object and an open object, as a oneOf branch:
// the union of their shapes kept the open side's required properties
// (or keys) for every object, so the literal object seemed to be none
// of the union's values, the oneOf was proved exclusive and compiled as
// anyOf, and {"x":1}, matching both branches, was written (a 200 whose
// body fails the client's schema). Such branches may overlap: refused.
func TestRT13OneOfUnionKeepsLiteralObjects(t *testing.T) {
	for _, s := range []string{
		`{"oneOf":[{"anyOf":[{"const":{"x":1}},{"type":"object","required":["y"]}]},{"const":{"x":1}}]}`,
		`{"oneOf":[{"anyOf":[{"type":"object","required":["y"]},{"enum":[{"x":1},2]}]},{"type":"object","properties":{"x":{"const":1}},"required":["x"]}]}`,
		`{"oneOf":[{"anyOf":[{"const":{"x":1}},{"type":"object","properties":{"y":{}},"additionalProperties":false}]},{"const":{"x":1}}]}`,
	} {
		refused(t, s, "unsupported_schema", "#/oneOf/0 and #/oneOf/1", "use anyOf")
	}
	// Still proved: a literal object beside an open one, against a
	// branch of another type.
	walkValidates(t, `{"oneOf":[{"anyOf":[{"const":{"x":1}},{"type":"object","required":["y"]}]},{"type":"string","maxLength":2}]}`, 40)
}

// References resolve as a validator resolves them, or the schema is
// refused: an "$id" below the root moves the base of the references
// under it (a validator reads "#/$defs/A" there as that schema's own
// $defs, sluice read the root's: {"p":5} written where a string was
// due), and a fragment is percent-encoded ("#/$defs/a%20b" is the key
// "a b", sluice looked up "a%20b").
func TestRT13ReferencesResolveAsValidators(t *testing.T) {
	for _, s := range []string{
		`{"type":"object","properties":{"p":{"$id":"http://example.com/inner","$defs":{"A":{"type":"string"}},"$ref":"#/$defs/A"}},"required":["p"],"$defs":{"A":{"type":"integer"}}}`,
		// reached by a pointer into it, past the schema with the $id
		`{"type":"object","properties":{"q":{"$ref":"#/$defs/X/properties/r"}},"required":["q"],"$defs":{"Y":{"type":"integer"},"X":{"$id":"http://e.com/x","$defs":{"Y":{"type":"string"}},"properties":{"r":{"$ref":"#/$defs/Y"}}}}}`,
		// under a keyword sluice refuses, pointed into
		`{"$ref":"#/$defs/X/not/properties/r","$defs":{"Y":{"type":"integer"},"X":{"not":{"$id":"http://e.com/x","$defs":{"Y":{"type":"string"}},"properties":{"r":{"$ref":"#/$defs/Y"}}}}}}`,
		`{"anyOf":[{"$id":"http://e.com/a","type":"string"},{"type":"null"}]}`,
	} {
		refused(t, s, "unsupported_schema", "$id is supported only at the schema's root")
	}
	// $id at the root, and "$id" as a property's name or inside data,
	// are fine.
	walkValidates(t, `{"$id":"http://e.com/root","type":"object","properties":{"$id":{"type":"string","maxLength":3},"p":{"$ref":"#/$defs/A"}},"required":["$id","p"],"$defs":{"A":{"enum":[{"$id":1},2]}}}`, 20)
	for _, s := range []string{
		`{"type":"object","properties":{"p":{"$ref":"#/$defs/a%20b"}},"required":["p"],"$defs":{"a%20b":{"type":"integer"},"a b":{"type":"string","maxLength":2}}}`,
		`{"type":"object","properties":{"p":{"$ref":"#/$defs/a~1b%25"}},"required":["p"],"$defs":{"a~1b%25":{"type":"integer"},"a/b%":{"type":"string","maxLength":2}}}`,
	} {
		walkValidates(t, s, 20)
	}
	refused(t, `{"$ref":"#/$defs/a%zz","$defs":{"a%zz":{"type":"string"}}}`, "invalid_schema")
}
