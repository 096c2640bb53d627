// Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
// The page of `higgs-v3 serve` (serving/page.py): speaks through POST /v1/audio/speech with stream_format "sse" and
// pcm (16-bit little-endian mono), each delta scheduled with the Web Audio API right after the one before, so the
// audio plays while it is generated. Its state is window.higgs (read by the browser test).
"use strict";

const higgs = window.higgs = {
  state: "loading",      // loading, ready, needs-key, speaking, done, refused, error
  message: "",           // what the status line says
  needsKey: false,       // the server answered 401 without a key
  model: null,           // the served model id (GET /v1/models)
  sampleRate: 24000,     // the model's rate (the pcm stream's)
  scheduledSeconds: 0,   // seconds of audio scheduled for the last request
  deltas: 0,             // audio pieces received for the last request
  unfinished: 0,         // chunks the model did not end (runaways), from the done event
};
let key = "";
let context = null;      // one AudioContext, made on the first press (browsers want a user gesture)
let playAt = 0;          // when the next piece starts, in the context's time

const $ = (id) => document.getElementById(id);

function show(message, kind = "") {
  higgs.message = message;
  const status = $("status");
  status.textContent = message;
  status.className = kind;
}

function headers(json = false) {
  const h = {};
  if (key) h["Authorization"] = "Bearer " + key;
  if (json) h["Content-Type"] = "application/json";
  return h;
}

// A refusal of the server in words: its OpenAI error message, with what to do for the statuses a user can act on.
async function refusal(response) {
  let message = `HTTP ${response.status}`;
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch (e) { /* not JSON: the status says it */ }
  if (response.status === 401) {
    higgs.needsKey = true;
    $("key-row").hidden = false;
    return "The API key was refused: enter the server's key above. (" + message + ")";
  }
  if (response.status === 503) {
    const after = response.headers.get("Retry-After");
    return "The server is busy" + (after ? `; retry in ${after} s` : "") + ". (" + message + ")";
  }
  return "Refused: " + message;
}

async function load() {
  let response;
  try {
    response = await fetch("/v1/models", {headers: headers()});
  } catch (e) {
    show("Cannot reach the server: " + e.message, "error");
    higgs.state = "error";
    return;
  }
  if (response.status === 401) {
    higgs.needsKey = true;
    higgs.state = "needs-key";
    $("key-row").hidden = false;
    show(key ? "That key was refused: check it and enter it again." : "This server wants an API key: enter it once above.",
         "warning");
    return;
  }
  if (!response.ok) {
    show(await refusal(response), "error");
    higgs.state = "error";
    return;
  }
  higgs.model = (await response.json()).data[0].id;
  const voices = await fetch("/v1/audio/voices", {headers: headers()});
  if (voices.ok) {
    const select = $("voice");
    for (const name of (await voices.json()).voices) {
      if (name === "default" || [...select.options].some((o) => o.value === name)) continue;
      const option = document.createElement("option");
      option.value = option.textContent = name;
      select.appendChild(option);
    }
  }
  higgs.state = "ready";
  show(`Ready: ${higgs.model}.` + (higgs.needsKey ? " Key accepted." : ""));
}

function clipAsDataURI(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

// Schedules 16-bit little-endian mono samples right after what is already scheduled.
function schedule(bytes) {
  const count = bytes.length >> 1;
  if (count === 0) return;
  const view = new DataView(bytes.buffer, bytes.byteOffset, count * 2);
  const buffer = context.createBuffer(1, count, higgs.sampleRate);
  const samples = buffer.getChannelData(0);
  for (let i = 0; i < count; i++) samples[i] = view.getInt16(2 * i, true) / 32768;
  const source = context.createBufferSource();
  source.buffer = buffer;
  source.connect(context.destination);
  playAt = Math.max(playAt, context.currentTime + 0.05);
  source.start(playAt);
  playAt += buffer.duration;
  higgs.scheduledSeconds += buffer.duration;
  higgs.deltas += 1;
}

function base64Bytes(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

// Reads the SSE stream as it arrives: speech.audio.delta (audio), speech.audio.done (the end), error.
async function readEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = "", done = null;
  for (;;) {
    const {value, done: ended} = await reader.read();
    if (value) text += decoder.decode(value, {stream: true});
    let cut;
    while ((cut = text.indexOf("\n\n")) >= 0) {
      const block = text.slice(0, cut);
      text = text.slice(cut + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const event = JSON.parse(line.slice(6));
        if (event.type === "speech.audio.delta") schedule(base64Bytes(event.audio));
        else if (event.type === "speech.audio.done") done = event;
        else if (event.type === "error") throw new Error(event.error.message);
      }
    }
    if (ended) break;
  }
  if (done === null) throw new Error("the stream ended before its last event (the server stopped?)");
  return done;
}

async function speak() {
  if (higgs.state === "speaking") return;
  if (higgs.needsKey && !key) {
    higgs.state = "refused";
    show("This server wants an API key: enter it once above, then press speak.", "error");
    return;
  }
  if (!higgs.model) await load();
  if (!higgs.model) return;
  const input = $("text").value;
  if (!input.trim()) {
    higgs.state = "refused";
    show("There is nothing to speak: type some text.", "error");
    return;
  }
  const body = {model: higgs.model, input, response_format: "pcm", stream_format: "sse"};
  const seed = $("seed").value.trim();
  if (seed !== "") body.seed = Number(seed);
  const clip = $("clip").files[0];
  if (clip) {
    body.reference_audio = await clipAsDataURI(clip);
    if ($("clip-text").value.trim()) body.reference_text = $("clip-text").value;
  } else if ($("voice").value !== "default") {
    body.voice = $("voice").value;
  }
  context = context || new AudioContext();
  if (context.state === "suspended") await context.resume();
  higgs.state = "speaking";
  higgs.scheduledSeconds = 0;
  higgs.deltas = 0;
  higgs.unfinished = 0;
  show("Speaking…");
  $("speak").disabled = true;
  try {
    const response = await fetch("/v1/audio/speech", {method: "POST", headers: headers(true), body: JSON.stringify(body)});
    if (!response.ok) {
      higgs.state = "refused";
      show(await refusal(response), "error");
      return;
    }
    const done = await readEvents(response);
    higgs.unfinished = done.unfinished_chunks || 0;
    higgs.state = "done";
    const seconds = higgs.scheduledSeconds.toFixed(2);
    if (higgs.unfinished > 0) {
      show(`Done: ${seconds} s of audio, but ${higgs.unfinished} chunk(s) ran to the length limit without an end ` +
           "(a runaway take: the model did not finish the sentence). Try another seed, or shorter text.", "warning");
    } else {
      show(`Done: ${seconds} s of audio.`);
    }
  } catch (e) {
    higgs.state = "error";
    show("The speech failed: " + e.message, "error");
  } finally {
    $("speak").disabled = false;
  }
}

async function useKey() {
  key = $("key").value.trim();
  if (!key) {
    show("Enter the key first.", "error");
    return;
  }
  higgs.model = null;
  await load();
}

$("speak").addEventListener("click", speak);
$("use-key").addEventListener("click", useKey);
$("key").addEventListener("keydown", (e) => { if (e.key === "Enter") useKey(); });
load();
