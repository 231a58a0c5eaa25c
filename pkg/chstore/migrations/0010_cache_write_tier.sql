-- UsageEvent.cache_write_tokens: the part of prompt_tokens written to the
-- provider's prompt cache (Anthropic cache_creation_input_tokens, Bedrock
-- cacheWriteInputTokens), billed at the cache-write price; and
-- UsageEvent.service_tier: the provider's service tier when it has a price
-- of its own ("flex", "priority"; '' for the standard tier). Rows loaded
-- before this migration read 0 and ''. One column per statement (the
-- runner skips an ADD COLUMN whose column exists).
ALTER TABLE usage_events ADD COLUMN cache_write_tokens UInt64;
ALTER TABLE usage_events ADD COLUMN service_tier String;
