package pricing

import (
	"strings"
	"testing"
)

// TestImagePrice: an image is billed by the size and quality the request
// names (issue 41, finding 10), from the embedded dall-e-3 entry.
func TestImagePrice(t *testing.T) {
	p, ok := Default().Lookup("dall-e-3")
	if !ok {
		t.Fatal("no dall-e-3 entry")
	}
	tests := []struct {
		name, quality, size string
		want                int64
	}{
		{"defaults", "", "", 40_000_000},
		{"standard square", "standard", "1024x1024", 40_000_000},
		{"tall, any quality", "", "1024x1792", 80_000_000},
		{"tall standard", "standard", "1024x1792", 80_000_000},
		{"hd at the default size", "hd", "", 80_000_000},
		{"hd square", "hd", "1024x1024", 80_000_000},
		{"hd wide", "hd", "1792x1024", 120_000_000},
		{"case does not matter", "HD", "1792X1024", 120_000_000},
		{"unlisted size pays per_image", "", "512x512", 40_000_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.ImagePrice(tt.quality, tt.size); got != tt.want {
				t.Errorf("ImagePrice(%q, %q) = %d, want %d", tt.quality, tt.size, got, tt.want)
			}
		})
	}
}

func TestImagePricesParse(t *testing.T) {
	tests := []struct {
		name, yaml, wantErr string
	}{
		{"no slash", `{per_image_by: {"1024x1792": "0.08"}}`, "want quality/size"},
		{"any of both", `{per_image_by: {"*/*": "0.08"}}`, "*/* is per_image"},
		{"twice", `{per_image_by: {"hd/*": "0.08", "HD/*": "0.09"}}`, "listed twice"},
		{"negative", `{per_image_by: {"hd/*": "-1"}}`, "line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte("version: v\nprices:\n  m: " + tt.yaml + "\n"))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Parse: %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
	a, err := Parse([]byte("version: v\nprices:\n  m: {per_image: \"0.04\", per_image_by: {\"hd/*\": \"0.08\"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(a.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	pa, _ := a.Lookup("m")
	pb, _ := b.Lookup("m")
	if !pa.Equal(pb) || pb.ImagePrice("hd", "") != 80_000_000 {
		t.Errorf("round trip: %v, want %v", pb, pa)
	}
}
