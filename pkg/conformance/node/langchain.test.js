// LangChain.js (@langchain/anthropic ChatAnthropic) through the gateway's
// /v1/messages on mock-gpt, a translated stream: usage in message_start,
// and a tool round trip.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ChatAnthropic } from "@langchain/anthropic";
import { tool } from "@langchain/core/tools";
import { HumanMessage } from "@langchain/core/messages";
import { z } from "zod";
import { gateway } from "./env.js";

const { url, token } = gateway();
const model = new ChatAnthropic({
  model: "mock-gpt",
  anthropicApiUrl: url,
  apiKey: token,
  maxTokens: 256,
  maxRetries: 0,
});

test("stream: input tokens > 0 (read from message_start)", async () => {
  let all;
  for await (const chunk of await model.stream("Hello there, how are you today?")) {
    all = all ? all.concat(chunk) : chunk;
  }
  assert.ok(all.usage_metadata, "usage_metadata");
  assert.ok(all.usage_metadata.input_tokens > 0, `input_tokens ${all.usage_metadata.input_tokens}`);
  assert.ok(all.usage_metadata.output_tokens > 0, `output_tokens ${all.usage_metadata.output_tokens}`);
});

const weather = tool(async ({ city }) => `sunny, 18 degrees in ${city}`, {
  name: "get_weather",
  description: "The weather in a city",
  schema: z.object({ city: z.string().min(1), unit: z.enum(["celsius", "fahrenheit"]).optional() }),
});

for (const streamed of [false, true]) {
  test(`tool round trip (${streamed ? "stream" : "invoke"})`, async () => {
    const bound = model.bindTools([weather]);
    const turn = async (messages) => {
      if (!streamed) return bound.invoke(messages);
      let all;
      for await (const chunk of await bound.stream(messages)) all = all ? all.concat(chunk) : chunk;
      return all;
    };
    const messages = [new HumanMessage("What is the weather in Paris? Use get_weather.")];
    const ai = await turn(messages);
    assert.equal(ai.tool_calls.length, 1, "one tool call");
    assert.equal(ai.tool_calls[0].name, "get_weather");
    const result = await weather.invoke(ai.tool_calls[0]); // a ToolMessage
    messages.push(ai, result);
    const final = await turn(messages);
    assert.equal(final.tool_calls?.length ?? 0, 0);
    assert.match(final.text, /sunny, 18 degrees in/);
  });
}
