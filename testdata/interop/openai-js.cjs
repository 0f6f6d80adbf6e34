// The official OpenAI JS client (npm "openai") against a sluice server:
// structured outputs and tool calls, streamed and not. Run by
// internal/router/node's TestInteropOpenAIJSClient (make test-interop),
// which checks what this prints (one JSON object on stdout).
const { OpenAI } = require(process.env.OPENAI_JS_MODULE);

const client = new OpenAI({ apiKey: "k", baseURL: process.env.BASE_URL, maxRetries: 0 });

const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather in a city",
    parameters: { type: "object", additionalProperties: false, required: ["city", "unit"],
      properties: { city: { type: "string", maxLength: 10 }, unit: { enum: ["c", "f"] } } } } },
  { type: "function", function: { name: "get_time",
    parameters: { type: "object", additionalProperties: false, required: ["tz"],
      properties: { tz: { enum: ["UTC", "CET", "PST"] } } } } },
];

const schema = { type: "object", additionalProperties: false, required: ["name", "age", "tags"],
  properties: { name: { type: "string", maxLength: 8 }, age: { type: "integer", minimum: 0, maximum: 120 },
    tags: { type: "array", maxItems: 2, items: { enum: ["a", "b"] } } } };

async function streamed(params) {
  const stream = client.chat.completions.stream(params);
  let heads = 0, frags = 0, content = "";
  stream.on("chunk", (ch) => {
    for (const c of ch.choices) {
      if (c.delta.content) content += c.delta.content;
      for (const d of c.delta.tool_calls || []) {
        if (d.id) heads++; else frags++;
      }
    }
  });
  const done = await stream.finalChatCompletion();
  return { completion: done, heads, frags, content };
}

async function main() {
  const models = await client.models.list();
  const model = models.data[0].id;
  const user = [{ role: "user", content: "What is the weather in Paris?" }];
  const out = { model, cases: [] };
  const formats = {
    json_schema: { type: "json_schema", json_schema: { name: "person", schema, strict: true } },
    json_object: { type: "json_object" },
  };
  for (const [name, rf] of Object.entries(formats)) {
    for (const seed of [1, 2]) {
      const p = { model, messages: user, temperature: 1, seed, max_tokens: 100, response_format: rf };
      const whole = await client.chat.completions.create(p);
      const s = await streamed(p);
      out.cases.push({ kind: name, seed, whole: whole.choices[0].message.content, finish: whole.choices[0].finish_reason,
        streamed: s.completion.choices[0].message.content, chunks: s.content, streamFinish: s.completion.choices[0].finish_reason });
    }
  }
  const choices = { required: "required", named: { type: "function", function: { name: "get_time" } } };
  for (const [name, tc] of Object.entries(choices)) {
    for (const seed of [1, 2]) {
      const p = { model, messages: user, tools, tool_choice: tc, temperature: 1, seed, max_tokens: 120 };
      const whole = await client.chat.completions.create(p);
      const s = await streamed(p);
      const w = whole.choices[0], sc = s.completion.choices[0];
      out.cases.push({ kind: name, seed, finish: w.finish_reason, calls: w.message.tool_calls,
        streamFinish: sc.finish_reason, streamCalls: sc.message.tool_calls, heads: s.heads, frags: s.frags });
    }
  }
  // Multi-turn: the call and the tool's answer go back through the template.
  const first = await client.chat.completions.create({ model, messages: user, tools, tool_choice: "required", seed: 1, max_tokens: 120 });
  const call = first.choices[0].message.tool_calls[0];
  const second = await client.chat.completions.create({ model, tools, tool_choice: "none", temperature: 0, max_tokens: 8,
    messages: [...user, first.choices[0].message, { role: "tool", tool_call_id: call.id, content: "18 C and sunny" }] });
  out.multiTurn = { content: second.choices[0].message.content, prompt: second.usage.prompt_tokens, firstPrompt: first.usage.prompt_tokens };
  // auto on a model that writes no call of its own: content.
  const auto = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], tools, temperature: 0, max_tokens: 8 });
  out.auto = { content: auto.choices[0].message.content, calls: auto.choices[0].message.tool_calls || [] };
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => { console.error(e); process.exit(1); });
