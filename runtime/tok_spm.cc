/*
 * tok_spm.cc: SentencePiece models through libsentencepiece (Debian libsentencepiece-dev).
 *
 * The library is the maintained implementation of the format (normalization, unigram and BPE
 * models, byte fallback), and its interface is C++: this file is libaxrt's only C++, a shim
 * that gives tok.c the C functions of an RtTokOps. No C++ exception crosses into C: every
 * call that can throw (allocation) is caught here and returned as an error. tok.c has walked
 * the protobuf before it gets here, so a truncated file never reaches the library.
 */
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

extern "C" {
#include "rt_impl.h"
}

namespace {

using Processor = sentencepiece::SentencePieceProcessor;

const Processor *proc(const void *impl) {
    return static_cast<const Processor *>(impl);
}

int64_t spm_vocab(const void *impl) {
    return proc(impl)->GetPieceSize();
}

int32_t spm_bos(const void *impl) {
    int id = proc(impl)->bos_id();
    return id >= 0 && id < proc(impl)->GetPieceSize() ? id : -1;
}

int spm_encode(const void *impl, const char *text, size_t n, int32_t **ids, int64_t *nids, RtError *err) {
    try {
        std::vector<int> out;
        auto st = proc(impl)->Encode(absl::string_view(text, n), &out);
        if (!st.ok())
            return rt_error_set(err, "%s", st.ToString().c_str());
        *ids = static_cast<int32_t *>(malloc(out.size() * sizeof(int32_t) + 1));
        if (!*ids)
            return rt_error_set(err, "out of memory for %zu tokens", out.size());
        for (size_t i = 0; i < out.size(); i++)
            (*ids)[i] = out[i];
        *nids = static_cast<int64_t>(out.size());
        return 0;
    } catch (const std::bad_alloc &) {
        return rt_error_set(err, "out of memory");
    }
}

int spm_decode(const void *impl, const int32_t *ids, int64_t n, char **text, size_t *len, RtError *err) {
    try {
        std::vector<int> in(ids, ids + n);
        std::string out;
        auto st = proc(impl)->Decode(in, &out);
        if (!st.ok())
            return rt_error_set(err, "%s", st.ToString().c_str());
        *text = static_cast<char *>(malloc(out.size() + 1));
        if (!*text)
            return rt_error_set(err, "out of memory for %zu bytes", out.size());
        memcpy(*text, out.data(), out.size());
        (*text)[out.size()] = 0;
        *len = out.size();
        return 0;
    } catch (const std::bad_alloc &) {
        return rt_error_set(err, "out of memory");
    }
}

/* A piece's bytes: U+2581 (the word boundary) is a space; a byte piece "<0xAB>" is its byte;
 * control pieces (<s>, </s>) are nothing; the unknown piece is what Decode prints for it. */
std::string piece_bytes(const Processor *p, int id) {
    if (p->IsControl(id))
        return std::string();
    if (p->IsUnknown(id))
        return " \xE2\x81\x87 ";
    std::string piece = p->IdToPiece(id);
    if (p->IsByte(id))
        return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
    std::string out;
    for (size_t i = 0; i < piece.size(); i++) {
        if (piece.compare(i, 3, "\xE2\x96\x81") == 0) {
            out += ' ';
            i += 2;
        } else {
            out += piece[i];
        }
    }
    return out;
}

int64_t spm_token_bytes(const void *impl, int32_t id, char *buf, size_t cap) {
    try {
        std::string s = piece_bytes(proc(impl), id);
        if (buf)
            memcpy(buf, s.data(), s.size() < cap ? s.size() : cap);
        return static_cast<int64_t>(s.size());
    } catch (const std::exception &) {
        return 0;
    }
}

void spm_free(void *impl) {
    delete static_cast<Processor *>(impl);
}

} // namespace

extern "C" int rt_spm_load(void **impl, const void *data, size_t n, RtError *err) {
    *impl = nullptr;
    try {
        Processor *p = new Processor();
        auto st = p->LoadFromSerializedProto(absl::string_view(static_cast<const char *>(data), n));
        if (!st.ok()) {
            delete p;
            return rt_error_set(err, "%s", st.ToString().c_str());
        }
        *impl = p;
        return 0;
    } catch (const std::bad_alloc &) {
        return rt_error_set(err, "out of memory");
    }
}

extern "C" const RtTokOps rt_spm_ops = {
    "sentencepiece", spm_vocab, spm_bos, spm_encode, spm_decode, spm_token_bytes, spm_free,
};
