package mockllm

import "testing"

// ValidateSchema checks a JSON value against a JSON schema for the
// keywords the argument generator supports (schema_test.go).
func ValidateSchema(t *testing.T, schema, value []byte) error {
	return validateSchema(t, schema, value)
}
