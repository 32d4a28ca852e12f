package scoring

import (
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/internal/radix"
)

// Left at its defaults, the router configures scoring with scoring's own
// defaults.
func TestDefaultOptionsConfig(t *testing.T) {
	o := DefaultOptions()
	idx := radix.New(radix.Config{})
	got, want := o.Config(idx), DefaultConfig()
	if got.Index != idx {
		t.Fatal("index not passed on")
	}
	if *got.TierWeights != *want.TierWeights {
		t.Fatalf("tier weights %v; want %v", *got.TierWeights, *want.TierWeights)
	}
	got.Index, got.TierWeights, want.TierWeights = nil, nil, nil
	// DefaultConfig also sets the unexported fields, which Options leaves
	// zero for New to fill in; compare the exported ones.
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range gv.NumField() {
		if f := gv.Type().Field(i); f.IsExported() && !reflect.DeepEqual(gv.Field(i).Interface(), wv.Field(i).Interface()) {
			t.Errorf("%s = %v; scoring's default is %v", f.Name, gv.Field(i), wv.Field(i))
		}
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
}
