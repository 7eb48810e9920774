// The page GET / serves: a prompt box whose Generate streams the
// completion in (fetch + a reader over the Server-Sent Events; EventSource
// only does GET), Stop aborts it (the server sees the disconnect and frees
// the request's blocks), and a panel polls /metrics each second.
#include "serve/http_server.h"

namespace px::serve {

const std::string& serve_page() {
  static const std::string page = R"PAGE(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>parallax serve</title>
<style>
body { font: 15px/1.5 system-ui, sans-serif; margin: 2em auto; max-width: 52em; color: #222; }
textarea { width: 100%; height: 6em; font: inherit; }
#out { white-space: pre-wrap; border: 1px solid #ccc; padding: .8em; min-height: 8em; background: #fafafa; }
#out .prompt { color: #777; }
label { margin-right: 1em; }
input[type=number] { width: 5em; }
#stats { color: #555; font-size: 13px; margin-top: 1em; }
</style></head>
<body>
<h1>parallax serve</h1>
<p id="model">model: …</p>
<textarea id="prompt">Once upon a time</textarea>
<p>
<label>max tokens <input id="max_tokens" type="number" value="200" min="1"></label>
<label>temperature <input id="temperature" type="number" value="0.8" step="0.1" min="0"></label>
<label>top-k <input id="top_k" type="number" value="40" min="0"></label>
<button id="go">Generate</button> <button id="stop" disabled>Stop</button>
</p>
<div id="out"></div>
<div id="stats"></div>
<script>
const $ = id => document.getElementById(id);
let controller = null;
fetch('/v1/models').then(r => r.json()).then(m => { $('model').textContent = 'model: ' + m.data[0].id; });
$('go').onclick = async () => {
  controller = new AbortController();
  $('go').disabled = true; $('stop').disabled = false;
  const out = $('out'); out.textContent = '';
  const prompt = document.createElement('span'); prompt.className = 'prompt'; prompt.textContent = $('prompt').value;
  const text = document.createElement('span'); text.id = 'generated';
  out.append(prompt, text);
  const body = { prompt: $('prompt').value, stream: true, max_tokens: +$('max_tokens').value,
                 temperature: +$('temperature').value, top_k: +$('top_k').value };
  try {
    const response = await fetch('/v1/completions', { method: 'POST', body: JSON.stringify(body),
      headers: { 'Content-Type': 'application/json' }, signal: controller.signal });
    if (!response.ok) { text.textContent = (await response.json()).error.message; return; }
    const reader = response.body.getReader(), decoder = new TextDecoder();
    let pending = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pending += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = pending.indexOf('\n\n')) >= 0) {
        const event = pending.slice(0, cut); pending = pending.slice(cut + 2);
        if (!event.startsWith('data: ')) continue;
        const data = event.slice(6);
        if (data === '[DONE]') continue;
        const chunk = JSON.parse(data);
        for (const c of chunk.choices) text.textContent += c.text;
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') text.textContent += '\n[' + e + ']';
  } finally {
    $('go').disabled = false; $('stop').disabled = true;
  }
};
$('stop').onclick = () => controller && controller.abort();
async function poll() {
  try {
    const lines = (await (await fetch('/metrics')).text()).split('\n');
    const value = name => { const l = lines.find(l => l.startsWith(name + ' ')); return l ? +l.split(' ')[1] : 0; };
    $('stats').textContent = `running ${value('parallax_requests_running')} · waiting ${value('parallax_requests_waiting')}` +
      ` · KV blocks ${value('parallax_kv_blocks_used')}/${value('parallax_kv_blocks_total')}` +
      ` · ${value('parallax_tokens_per_second').toFixed(1)} tokens/s`;
  } catch (e) {}
  setTimeout(poll, 1000);
}
poll();
</script>
</body></html>
)PAGE";
  return page;
}

}  // namespace px::serve
