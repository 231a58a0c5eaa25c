package docker

import (
	"os"
	"slices"
	"testing"
)

func TestBinaries(t *testing.T) {
	tests := []struct {
		name, dockerfile string
		want             []string
		wantErr          bool
	}{
		{"continued lines", "FROM golang AS build\nRUN CGO_ENABLED=0 go build -trimpath -o /out/ \\\n  ./services/gateway ./services/budget\nFROM scratch\nCOPY --from=build /out/ /usr/local/bin/\n",
			[]string{"/usr/local/bin/gateway", "/usr/local/bin/budget"}, false},
		{"no build", "FROM scratch\nCOPY --from=build /out/ /usr/local/bin/\n", nil, true},
		{"output not copied", "RUN go build -o /out/ ./services/gateway\nCOPY --from=build /elsewhere/ /usr/local/bin/\n", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Binaries(tc.dockerfile)
			if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
				t.Fatalf("Binaries = %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
	t.Run("Dockerfile", func(t *testing.T) {
		b, err := os.ReadFile("Dockerfile")
		if err != nil {
			t.Fatal(err)
		}
		got, err := Binaries(string(b))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"gateway", "budget", "analytics", "mockllm", "tollctl"} {
			if !slices.Contains(got, BinDir+"/"+p) {
				t.Errorf("image lacks %s: %q", p, got)
			}
		}
	})
}
