package result_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bpfbench/bpfbench/result"
)

// testdata/validation.json was written by the validate job before
// validation.json was typed here: every key reads into a field, and
// written again it is the same bytes; it validates against
// docs/validation.schema.json, which refuses a key of no field.
func TestValidationFixture(t *testing.T) {
	const fixture = "testdata/validation.json"
	b, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var v result.Validation
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	if len(v.Rows) != 2 || v.Rows[0].JudgedTop() != "cpu_runqueue" || v.Rows[0].JudgedShare() != 0.82 || !v.Rows[1].Weak {
		t.Errorf("rows: %+v", v.Rows)
	}
	again, err := json.MarshalIndent(&v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if again = append(again, '\n'); !bytes.Equal(again, b) {
		t.Errorf("written again:\n%s\nwant:\n%s", again, b)
	}

	f, err := os.Open("../docs/validation.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(result.ValidationSchemaID, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(result.ValidationSchemaID)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(inst); err != nil {
		t.Errorf("%s does not validate: %v", fixture, err)
	}
	bad := bytes.Replace(b, []byte(`"pid": 4242,`), []byte(`"pid": 4242, "no_such_key": 1,`), 1)
	if inst, err = jsonschema.UnmarshalJSON(bytes.NewReader(bad)); err != nil {
		t.Fatal(err)
	}
	if s.Validate(inst) == nil {
		t.Error("validated a key of no field")
	}
}
