package wire

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"
)

func TestNewID(t *testing.T) {
	re := regexp.MustCompile(`^post-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := NewID("post")
		if !re.MatchString(id) {
			t.Fatalf("id %q does not match %s", id, re)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
	}
}

func TestFormatTime(t *testing.T) {
	cases := []struct {
		in   time.Time
		want string
	}{
		{time.Date(2024, 1, 2, 3, 4, 5, 6_000_000, time.UTC), "2024-01-02T03:04:05.006Z"},
		{time.Date(2024, 1, 2, 12, 0, 0, 0, time.FixedZone("KST", 9*3600)), "2024-01-02T03:00:00.000Z"},
		{time.Time{}, ""},
	}
	for _, c := range cases {
		if got := FormatTime(c.in); got != c.want {
			t.Errorf("FormatTime(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestTimeJSON(t *testing.T) {
	in := T(time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC))
	b, err := in.MarshalJSON()
	if err != nil || string(b) != `"2024-05-06T07:08:09.123Z"` {
		t.Fatalf("MarshalJSON = %s, %v", b, err)
	}
	var out Time
	if err := out.UnmarshalJSON(b); err != nil || !out.Equal(in.Time) {
		t.Fatalf("round trip = %v, %v", out, err)
	}
	typ, data, _ := in.MarshalBSONValue()
	var back Time
	if err := back.UnmarshalBSONValue(typ, data); err != nil || !back.Equal(in.Time) {
		t.Fatalf("BSON round trip = %v, %v", back, err)
	}
}

// TestTimeJSONText: MarshalJSON writes what json.Marshal of FormatTime
// writes, the zero time and zones included.
func TestTimeJSONText(t *testing.T) {
	for _, in := range []time.Time{{}, time.Date(2024, 1, 2, 12, 0, 0, 0, time.FixedZone("KST", 9*3600)),
		time.Date(1, 1, 1, 0, 0, 0, 1e6, time.UTC), time.Date(12345, 12, 31, 23, 59, 59, 999e6, time.UTC)} {
		want, _ := json.Marshal(FormatTime(in))
		if got, err := (Time{in}).MarshalJSON(); err != nil || string(got) != string(want) {
			t.Errorf("MarshalJSON(%v) = %s, %v, want %s", in, got, err, want)
		}
	}
}

func TestDerivedID(t *testing.T) {
	a, b := DerivedID("sa", "d", "p", "1"), DerivedID("sa", "d", "p", "1")
	if a != b || !regexp.MustCompile(`^sa-[0-9a-f]{12}$`).MatchString(a) {
		t.Fatalf("%q %q", a, b)
	}
	// Parts are kept apart: "d","p1" is not "dp","1".
	if DerivedID("sa", "d", "p1") == DerivedID("sa", "dp", "1") {
		t.Fatal("collision")
	}
}
