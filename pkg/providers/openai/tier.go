package openai

import (
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/rawjson"
)

// tierOf reads the service tier an answer reports, from the raw value of
// its service_tier member (of a chat or completions body or stream chunk,
// or response.service_tier of a Responses stream's terminal event), for
// pricing at that tier; a tier without a price of its own ("default",
// "auto", "scale") is the standard one, and so is anything but a string.
func tierOf(raw string) pricing.ServiceTier {
	if !rawjson.IsString(raw) {
		return pricing.TierStandard
	}
	return pricing.ParseServiceTier(rawjson.Unquote(raw))
}
