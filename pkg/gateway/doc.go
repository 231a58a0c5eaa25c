// Package gateway is Tollgate's public HTTP front: OpenAI-compatible
// endpoints on fiber that authenticate the caller, pick the model's target
// and relay the provider's answer, streaming chunk by chunk.
//
// # One pipeline
//
// Every endpoint runs the same stages over one request-owned value, the
// record (serve.go):
//
//   - begin (pipeline.go): request id, trace span, the state (config,
//     routes, prices) the request will finish on;
//   - authenticate: the bearer token (x-api-key too on /v1/messages,
//     x-goog-api-key on the Gemini endpoints);
//   - parse: the endpoint's own (parseRequest for the chat family and
//     scanMessages for the Messages API, each one pass over the body with
//     rawjson.Scan; the pass-through parsers for theirs), then any file
//     the body names must be the caller's (owners.go);
//   - resolve (pipeline.go): model lookup (404 before the token's
//     allow-list), wildcard capture, endpoint kind, allow-list, the budget
//     degradation ladder;
//   - the response cache and admission (rate limits, budget reservation;
//     a cache hit is admitted too before it is served, cache.go);
//   - attempts (pipeline.go): routing, retries and fallbacks, the router's
//     bookkeeping, keys, headers, attempt spans, the plan's release; before
//     the first call, the begun record a killed gateway's next start bills
//     from (begun.go, issue #47);
//   - finish (serve.go), the one place a request ends: billed, its usage
//     event enqueued, metrics, span and log line.
//
// An endpoint is an adapter that supplies only what is its own: its parse,
// how one target is built and called (a caller: chatCaller for chat,
// completions, embeddings and the Responses API, with hedging, a
// Responses API request to a target that does not speak it translated to
// chat and back, without hedging, responses_translate.go;
// messagesCaller for /v1/messages, native or translated, without hedging;
// countTokensCaller for /v1/messages/count_tokens, native or counted by
// the gateway, free but admitted and recorded like any request;
// geminiCaller and geminiCountCaller for the Gemini API's
// /v1beta/models/{model}:generateContent, :streamGenerateContent and
// :countTokens, the same way with gemini providers native),
// its error shape and its stream encoder (encoder: Anthropic events
// for /v1/messages, Gemini chunks for the Gemini endpoints). The
// pass-through endpoints make one call and never retry (a streamed upload
// cannot be sent twice). The
// adapters' per-request state lives in the record (callState), so a
// request needs one record and no adapter of its own. Records come from a
// pool (begin) and go back when the request ended in its handler (release,
// deferred by chat and /v1/messages).
//
// A stream's record passes to its relay at commit (commitStream); from then
// on the relay finishes the request. A hedge leg's relay reads only what
// was set before its call until it wins. Whatever holds a record beyond
// its handler (a relay, hedge legs, a replayed cache hit, a pass-through
// body stream) marks it held, and a held record is never pooled: it is
// left to the garbage collector.
//
// Budget reservations belong to budget.Tracker from Reserve to release;
// provider kinds' capabilities (base URL, key check, key header, the
// endpoints they speak) to pkg/providers/registry.
package gateway
