// The Vercel AI SDK (ai + @ai-sdk/openai) on mock-gpt through the gateway:
// a zod-typed tool's round trip, with generateText and streamText.
import { test } from "node:test";
import assert from "node:assert/strict";
import { generateText, streamText, tool, stepCountIs } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { z } from "zod";
import { gateway } from "./env.js";

const { url, token } = gateway();
// .chat: the Chat Completions API (the provider's default is the Responses API).
const model = createOpenAI({ baseURL: `${url}/v1`, apiKey: token }).chat("mock-gpt");

function weatherTool(calls) {
  return tool({
    description: "The weather in a city",
    inputSchema: z.object({
      city: z.string().min(1),
      unit: z.enum(["celsius", "fahrenheit"]),
      days: z.number().int().min(1).max(7).optional(),
    }),
    execute: async ({ city, unit }) => {
      calls.push(city);
      return `sunny, 18 degrees ${unit} in ${city}`;
    },
  });
}

const prompt = "What is the weather in Paris? Use the weather tool.";

test("generateText: tool call, tool result, final answer", async () => {
  const calls = [];
  const result = await generateText({
    model,
    prompt,
    tools: { weather: weatherTool(calls) },
    stopWhen: stepCountIs(4),
    maxRetries: 0,
  });
  assert.equal(calls.length, 1, "one tool call");
  assert.equal(result.steps.length, 2);
  assert.equal(result.steps[0].finishReason, "tool-calls");
  assert.equal(result.finishReason, "stop");
  assert.match(result.text, /sunny, 18 degrees celsius/);
  assert.ok(result.totalUsage.inputTokens > 0);
});

test("streamText: the same round trip streamed", async () => {
  const calls = [];
  const result = streamText({
    model,
    prompt,
    tools: { weather: weatherTool(calls) },
    stopWhen: stepCountIs(4),
    maxRetries: 0,
    onError: ({ error }) => {
      throw error;
    },
  });
  let text = "";
  for await (const part of result.textStream) text += part;
  assert.equal(calls.length, 1, "one tool call");
  assert.equal((await result.steps).length, 2);
  assert.match(text, /sunny, 18 degrees celsius/);
});
