// Package anthropic is the provider for Anthropic's Messages API, and the
// translation of the gateway's inbound Anthropic format.
//
// # Outbound: OpenAI chat -> Messages API
//
// Build sends POST {base}/v1/messages with x-api-key, anthropic-version
// (Options.Version, default 2023-06-01) and the client's anthropic-beta
// header when present. Only /v1/chat/completions is served. The request is
// translated so:
//
//   - system and developer messages, wherever they are, become the
//     top-level system blocks, in order; user, assistant and tool messages
//     keep their order, and consecutive messages of the same role are merged
//     into one turn (tool results are user turns), as Anthropic requires
//     alternating roles. Empty text is dropped (Anthropic refuses empty text
//     blocks), and a message left with nothing is dropped with it.
//   - image_url parts: a base64 data URL (jpeg, png, gif, webp) becomes a
//     base64 image source, an http(s) URL a url source (never fetched
//     here); detail is dropped. file parts with a base64 PDF file_data
//     become document blocks. Other parts (input_audio, file_id) are refused.
//   - assistant tool_calls become tool_use blocks (arguments must be a JSON
//     object), tool messages tool_result blocks. Tool call ids are kept but
//     for bytes outside [A-Za-z0-9_-], which become '_' on both sides.
//   - tools become name, description and input_schema (parameters, or an
//     empty object schema); strict is dropped; non-function tools are
//     refused. tool_choice auto/none/required/named maps to
//     auto/none/any/tool; parallel_tool_calls false sets
//     disable_parallel_tool_use. Without tools both are dropped.
//   - max_tokens is Call.ClampMaxTokens when positive, else the request's
//     max_completion_tokens or max_tokens, else Options.MaxTokens (4096).
//   - stop becomes stop_sequences (empty strings dropped); temperature
//     (at most 1, else refused), top_p and top_k pass through; user becomes
//     metadata.user_id.
//   - response_format json_object adds a system instruction to answer with
//     one JSON object (Anthropic has no JSON switch); json_schema is refused
//     (no native structured output); text is a no-op.
//   - reasoning_effort low/medium/high enables thinking with a budget of
//     1024/4096/16384 tokens, capped below max_tokens (refused when that
//     leaves less than 1024); none and minimal leave thinking off. A
//     "thinking" object in the request is passed through as is and wins.
//     Thinking blocks cannot round-trip through the OpenAI format, so a
//     multi-turn tool conversation with thinking on may be refused upstream.
//   - the other top-level members are mapped, dropped or refused (with a
//     *providers.ParamError naming the member) as Policy says; the
//     Providers page's table (docs/providers.md) is generated from it.
//     Roles other than system/developer/user/assistant/tool are refused;
//     message names are dropped.
//
// Answers: text blocks are joined into content, thinking blocks into
// reasoning_content (a delta field in streams), tool_use blocks become
// tool_calls with the input as the arguments string. stop_reason end_turn,
// stop_sequence and pause_turn map to stop, max_tokens and
// model_context_window_exceeded to length, tool_use to tool_calls, refusal
// to content_filter. Usage: prompt_tokens is input_tokens +
// cache_creation_input_tokens + cache_read_input_tokens, cached_tokens is
// cache_read_input_tokens, the gateway's cache-write count (billed at the
// cache-write price; not in the OpenAI body) is
// cache_creation_input_tokens, completion_tokens is output_tokens (which
// includes thinking: reasoning_tokens is reported as 0). In streams the
// input usage comes from message_start, the output from message_delta; the
// usage chunk is sent, before [DONE], when the client asked for it and the
// upstream reported usage. ping and unknown events produce nothing; an
// "error" event fails the stream with a *providers.UpstreamError.
//
// # Inbound: Messages API -> OpenAI chat
//
// RequestToOpenAI, ResponseFromOpenAI and Encoder serve POST /v1/messages
// on any provider:
//
//   - system (string or text blocks) and then the system-role messages
//     inside messages (Claude Code sends them; string or text blocks), in
//     order and joined by blank lines, become one system message, first
//     (chat templates of OpenAI-compatible servers take a system message
//     only there; each kind folds it into its own instruction); user text, image (base64 or url) and document (base64
//     PDF or text) blocks become parts; tool_result blocks become tool
//     messages placed before the rest of their turn, with their text joined
//     by newlines and their images moved to the user message that follows
//     (OpenAI tool messages carry text only); is_error is dropped.
//   - assistant text blocks are joined into content, tool_use blocks become
//     tool_calls; thinking and redacted_thinking blocks are dropped.
//   - tools (client tools only; server tools are refused) become functions,
//     tool_choice auto/any/tool/none maps to auto/required/named/none and
//     disable_parallel_tool_use to parallel_tool_calls false;
//     stop_sequences becomes stop, metadata.user_id user, max_tokens,
//     temperature and top_p pass through, a stream asks for the usage chunk.
//   - output_config.effort low/medium/high becomes reasoning_effort (max
//     becomes high); without it, thinking enabled with budget_tokens
//     becomes low below 4096, medium below 16384, else high. Adaptive
//     thinking without an effort leaves the target's default; thinking
//     disabled drops the effort. reasoning_effort is written last, and a
//     kind without one (registry.Kind.ReasoningEffort: bedrock) gets the
//     translation without it (DropReasoningEffort). thinking.display is
//     moot: reasoning is never answered. Another thinking type or effort
//     is refused.
//   - output_config.format json_schema becomes response_format json_schema
//     (strict, named "output"); another format is refused.
//   - dropped, documented: cache_control on any block or tool (prompt
//     caching is the target's own; cached tokens it reports are billed at
//     the cached price), context_management (its edits clear old tool
//     results and thinking server-side; a translated target keeps the
//     whole conversation the client sends), top_k, service_tier, container
//     and any key not named here but "mock" (passed through); non-empty
//     mcp_servers are refused. The client's anthropic-beta and
//     anthropic-version headers and its query string (Claude Code's
//     ?beta=true) never reach a translated target: only anthropic
//     providers read the client's headers.
//
// Answers: content and refusal become a text block, tool calls tool_use
// blocks, reasoning is dropped; finish_reason stop, length, tool_calls and
// content_filter map to end_turn, max_tokens, tool_use and refusal. Usage
// reports cached prompt tokens as cache_read_input_tokens apart from
// input_tokens.
//
// BuildNative, BuildCountTokens, NativeStream and UsageOf pass an
// Anthropic client's request through to an Anthropic provider unchanged.
package anthropic
