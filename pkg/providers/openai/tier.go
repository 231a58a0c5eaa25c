package openai

import (
	"github.com/tidwall/gjson"

	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/rawjson"
)

// serviceTier reads the service tier an answer reports at path
// (service_tier of a chat or completions body or stream chunk,
// response.service_tier of a Responses stream's terminal event), for
// pricing at that tier; a tier without a price of its own ("default",
// "auto", "scale") is the standard one.
func serviceTier(json, path string) pricing.ServiceTier {
	v := gjson.Get(json, path)
	if v.Type != gjson.String {
		return pricing.TierStandard
	}
	return pricing.ParseServiceTier(v.Str)
}

// tierOf is serviceTier for the raw value of a service_tier member.
func tierOf(raw string) pricing.ServiceTier {
	if !rawjson.IsString(raw) {
		return pricing.TierStandard
	}
	return pricing.ParseServiceTier(rawjson.Unquote(raw))
}
