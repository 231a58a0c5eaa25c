package pricing

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// ImagePrices are the per-image prices of an image model by quality and
// size, for the sizes and qualities that do not cost Price.PerImage (issue
// 41, finding 10: an HD or large image is not billed as a standard one).
// Each entry is written "quality/size" in a price file, with "*" for any
// quality or any size: "hd/1792x1024", "*/1024x1792", "hd/*". An
// ImagePrices is never modified after it is built, so Prices share it.
type ImagePrices struct {
	entries []imagePrice // sorted by quality, then size
}

// imagePrice is one entry of ImagePrices, nano-USD per image.
type imagePrice struct {
	quality, size string // lower case; "*" for any
	price         int64
}

// WithImagePrices returns p with PerImageBy set from decimal USD amounts
// keyed "quality/size" ("*" for any one of them, never both), as found in
// config (per_image_by). An empty map keeps it nil.
func (p Price) WithImagePrices(m map[string]string) (Price, error) {
	nano := make(map[string]int64, len(m))
	for key, text := range m {
		v, err := ParseUSD(text)
		if err != nil {
			return Price{}, fmt.Errorf("per_image_by[%q]: %w", key, err)
		}
		nano[key] = v
	}
	ip, err := newImagePrices(nano)
	if err != nil {
		return Price{}, err
	}
	p.PerImageBy = ip
	return p, nil
}

// newImagePrices builds ImagePrices from nano-USD amounts keyed
// "quality/size"; nil for none. Keys are matched case-insensitively.
func newImagePrices(m map[string]int64) (*ImagePrices, error) {
	if len(m) == 0 {
		return nil, nil
	}
	ip := &ImagePrices{entries: make([]imagePrice, 0, len(m))}
	for key, v := range m {
		q, s, err := splitImageKey(key)
		if err != nil {
			return nil, err
		}
		ip.entries = append(ip.entries, imagePrice{quality: q, size: s, price: v})
	}
	sort.Slice(ip.entries, func(i, j int) bool {
		a, b := ip.entries[i], ip.entries[j]
		if a.quality != b.quality {
			return a.quality < b.quality
		}
		return a.size < b.size
	})
	for i := 1; i < len(ip.entries); i++ {
		if a, b := ip.entries[i-1], ip.entries[i]; a.quality == b.quality && a.size == b.size {
			return nil, fmt.Errorf("per_image_by: %s/%s is listed twice", a.quality, a.size)
		}
	}
	return ip, nil
}

// splitImageKey reads a per_image_by key "quality/size".
func splitImageKey(key string) (quality, size string, err error) {
	q, s, ok := strings.Cut(strings.ToLower(strings.TrimSpace(key)), "/")
	switch {
	case !ok || q == "" || s == "" || strings.Contains(s, "/"):
		return "", "", fmt.Errorf("per_image_by[%q]: want quality/size, e.g. hd/1024x1792, */1024x1792 or hd/*", key)
	case q == "*" && s == "*":
		return "", "", fmt.Errorf("per_image_by[%q]: */* is per_image", key)
	}
	return q, s, nil
}

// find returns the price of quality and size as written, "*" included.
func (ip *ImagePrices) find(quality, size string) (int64, bool) {
	for _, e := range ip.entries {
		if strings.EqualFold(e.quality, quality) && strings.EqualFold(e.size, size) {
			return e.price, true
		}
	}
	return 0, false
}

// Each calls f with every entry's key ("quality/size") and price, in key
// order.
func (ip *ImagePrices) Each(f func(key string, nano int64)) {
	if ip == nil {
		return
	}
	for _, e := range ip.entries {
		f(e.quality+"/"+e.size, e.price)
	}
}

// ImagePrice returns the price of one image of quality and size, as a
// request names them ("" when it does not), in nano-USD: the PerImageBy
// entry for both, else for the size at any quality ("*/size"), else for
// the quality at any size ("quality/*"), else PerImage. A request that
// names neither pays PerImage: the provider's default size and quality.
// Values are compared case-insensitively; it does not allocate.
func (p *Price) ImagePrice(quality, size string) int64 {
	ip := p.PerImageBy
	if ip == nil || quality == "" && size == "" {
		return p.PerImage
	}
	if quality != "" && size != "" {
		if v, ok := ip.find(quality, size); ok {
			return v
		}
	}
	if size != "" {
		if v, ok := ip.find("*", size); ok {
			return v
		}
	}
	if quality != "" {
		if v, ok := ip.find(quality, "*"); ok {
			return v
		}
	}
	return p.PerImage
}

// Equal reports whether p and q are the same prices, PerImageBy compared
// by its entries (== compares it by identity).
func (p Price) Equal(q Price) bool {
	a, b := p.PerImageBy, q.PerImageBy
	p.PerImageBy, q.PerImageBy = nil, nil
	if p != q {
		return false
	}
	switch {
	case a == b:
		return true
	case a == nil || b == nil:
		return false
	}
	return slices.Equal(a.entries, b.entries)
}
