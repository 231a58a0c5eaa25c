-- UsageEvent.cache_write_tokens: the part of prompt_tokens written to the
-- provider's prompt cache (Anthropic cache_creation_input_tokens, Bedrock
-- cacheWriteInputTokens), billed at the cache-write price. Rows loaded
-- before this migration read 0.
ALTER TABLE usage_events ADD COLUMN cache_write_tokens UInt64;
