// Package openai is the provider for every OpenAI-compatible server (OpenAI
// itself, vLLM, Ollama, LM Studio, llama.cpp, Groq, Together, Fireworks,
// DeepSeek, Mistral, OpenRouter, xAI, Perplexity, Cerebras, ...) and for
// Azure OpenAI. Requests and answers pass through unchanged but for
// byte-level edits: the model name, stream_options.include_usage and a
// clamped max_tokens.
//
// # Responses API by translation
//
// RequestFromResponses, ResponseFromChat and ResponsesEncoder serve POST
// /v1/responses on a provider whose server does not speak the Responses
// API (anthropic, gemini, bedrock, OpenAI-compatible presets without it):
// the request becomes a chat completions request, which the target kind
// translates as any other, and the answer comes back in the Responses
// format.
//
//   - instructions, then the text of every system and developer message
//     of the input, in order and joined by blank lines, become one system
//     message, first (as the Messages translation does). A string input is
//     one user message. User messages keep their order: input_text parts
//     become text parts, input_image with an image_url (data: or https:)
//     an image_url part (detail kept), input_file with file_data a file
//     part; file_id and file_url references are refused (the target cannot
//     fetch the provider's files).
//   - Assistant messages (output_text and refusal parts) and the
//     function_call items that follow them become one assistant message
//     with content and tool_calls (call_id as the id, arguments as they
//     are; a namespaced call keeps its name); function_call_output items
//     become tool messages (a string, or the text of its parts joined by
//     newlines). reasoning items are dropped: a translated target cannot
//     read another model's reasoning. item_reference items (stored items)
//     and other item types are refused.
//   - Function tools become chat function tools (name, description,
//     parameters, strict). Tool groups (type namespace) are dropped: their
//     calls would need the namespace back. Built-in tools (web_search,
//     file_search, code_interpreter, computer use, image_generation, mcp,
//     local_shell, custom) run on OpenAI's servers only and are refused,
//     naming tools[i].type. tool_choice auto, none, required and
//     {"type":"function","name"} map to their chat forms; other choices are
//     refused; parallel_tool_calls false is kept.
//   - max_output_tokens becomes max_tokens; temperature and top_p pass;
//     reasoning.effort none, minimal, low, medium and high become
//     reasoning_effort, xhigh becomes high, written last so that a kind
//     without one gets the request without it; text.format json_schema
//     (name, description, strict, schema) and json_object become
//     response_format; metadata passes (the kinds drop it); user, else
//     safety_identifier, becomes user; "mock" (the test mock's behaviour)
//     passes.
//   - Refused with a *providers.ParamError naming the parameter, since a
//     translated target keeps no state: store true (false or absent
//     passes), previous_response_id, conversation, prompt (stored
//     prompts).
//   - Dropped: include (reasoning.encrypted_content: no reasoning is
//     returned), reasoning.summary, text.verbosity, prompt_cache_key,
//     truncation, service_tier, top_logprobs, max_tool_calls,
//     client_metadata, stream_options, and any key this list does not name.
//
// Answers: the text (content, else a refusal) becomes a message item with
// one output_text part, each tool call a function_call item (call_id the
// tool call's id); reasoning is dropped. finish_reason length makes the
// response incomplete with reason max_output_tokens, content_filter with
// reason content_filter. Usage: input_tokens, input_tokens_details.
// cached_tokens, output_tokens and output_tokens_details.reasoning_tokens
// are the target's counts, which the gateway bills. Streams follow the
// Responses event sequence (ResponsesEncoder). Ids: resp_, msg_ and fc_
// followed by the gateway's request id. The response object's echo of the
// request (instructions, tools, tool_choice, temperature, top_p,
// max_output_tokens, metadata, user) holds neutral values, not the
// request's: store is false, background false, truncation disabled.
package openai
