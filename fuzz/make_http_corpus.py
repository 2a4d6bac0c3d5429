#!/usr/bin/env python3
"""Writes the seed corpus of the http_request fuzz target (fuzz/corpus/http_request/): raw HTTP/1.1
requests as a client sends them to `qkv serve`, one connection per file. Valid requests to every route
(docs/api.md), and the malformed kinds docs/robustness.md lists for the HTTP API: invalid JSON, wrong
types, a chunked or length-less or compressed body, a Content-Length over the limit, an unknown method,
a header without a colon, a request line longer than httplib's limit, path traversal, pipelining.

Standard library only; deterministic. Run from anywhere:  python3 fuzz/make_http_corpus.py
The fuzz target's body limit is 4096 bytes (fuzz/targets/http_request.cpp); its model has 16 positions
and the byte-level tokenizer (256 tokens).
"""
import gzip
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "http_request")
HOST = "Host: 127.0.0.1:8080\r\n"


def get(path, headers=""):
    return f"GET {path} HTTP/1.1\r\n{HOST}{headers}\r\n".encode()


def post(path, body, headers="", content_type="application/json"):
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    head = f"POST {path} HTTP/1.1\r\n{HOST}Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n{headers}\r\n"
    return head.encode() + body


def chunked(body, sizes):
    out, i = b"", 0
    for n in sizes:
        out += b"%x\r\n" % n + body[i:i + n] + b"\r\n"
        i += n
    return out + b"0\r\n\r\n"


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    seeds = {}
    # valid requests, one per route
    seeds["ok_get_page"] = get("/", "Accept: text/html\r\nAccept-Encoding: gzip, deflate\r\n")
    seeds["ok_get_app_js"] = get("/app.js")
    seeds["ok_get_info"] = get("/api/info")
    seeds["ok_get_soft_dictionary"] = get("/api/soft-dictionary")
    seeds["ok_get_heads"] = get("/api/heads")
    seeds["ok_get_circuits"] = get("/api/circuits")
    seeds["ok_post_tokenize"] = post("/api/tokenize", {"text": "hi there"})
    seeds["ok_post_attention"] = post("/api/attention", {"text": "abcabc", "layer": 1, "head": 1, "thumb": 4})
    seeds["ok_post_attention_ids"] = post("/api/attention", {"ids": [97, 98, 99], "grid": False, "scale": False})
    seeds["ok_post_heads"] = post("/api/heads", {"text": "abab"})
    seeds["ok_post_soft_dictionary"] = post(
        "/api/soft-dictionary",
        {"Q": [[1, 2]], "K": [[1, 0], [1, 1], [0, 2]], "V": [[1, 0], [0.5, 0.5], [1, 0]], "scale": True,
         "names": ["sat", "bank", "river"]})
    seeds["ok_query_string"] = get("/api/info?x=1&y=%zz&&=")
    seeds["ok_head"] = b"HEAD /api/info HTTP/1.1\r\n" + HOST.encode() + b"\r\n"
    seeds["ok_http10"] = b"GET /api/info HTTP/1.0\r\n\r\n"
    seeds["ok_pipelined"] = (get("/api/info") + post("/api/tokenize", {"text": "ab"}) +
                             get("/api/soft-dictionary", "Connection: close\r\n") + get("/never-read"))
    seeds["ok_expect_continue"] = post("/api/tokenize", {"text": "x"}, "Expect: 100-continue\r\n")
    seeds["ok_empty_text_tokenize"] = post("/api/tokenize", {"text": ""})  # 0 tokens, fits
    seeds["ok_header_no_colon"] = get("/api/info", "NoColonHere\r\n")  # httplib 0.11.4 skips such a line
    seeds["ok_range"] = get("/api/info", "Range: bytes=0-9,20-\r\n")
    # client errors: 400
    seeds["bad_json_soft_dictionary"] = post("/api/soft-dictionary", '{"Q": [[1, 2]], "K": [[1, 0]')
    seeds["bad_json_attention"] = post("/api/attention", '{"text": "ab", "layer": }')
    seeds["bad_types_soft_dictionary"] = post("/api/soft-dictionary", {"Q": [[1, "x"]], "K": [[1e300, 0]], "names": 3})
    seeds["bad_ragged_soft_dictionary"] = post("/api/soft-dictionary", {"Q": [[1, 2]], "K": [[1, 0], [1]]})
    seeds["bad_ids_attention"] = post("/api/attention", {"ids": [1, 256, -1], "layer": 7})
    seeds["bad_both_text_and_ids"] = post("/api/attention", {"text": "a", "ids": [1]})
    seeds["bad_too_long_attention"] = post("/api/attention", {"text": "x" * 17})
    seeds["bad_not_object_heads"] = post("/api/heads", [1, 2, 3])
    seeds["bad_deep_json"] = post("/api/attention", "[" * 2000 + "]" * 2000)
    seeds["bad_invalid_utf8"] = post("/api/tokenize", b'{"text": "\xff\xfe\xc3"}')
    seeds["bad_method"] = b"FETCH /api/info HTTP/1.1\r\n" + HOST.encode() + b"\r\n"
    seeds["bad_header_too_long"] = get("/api/info", "X-Long: " + "b" * 9000 + "\r\n")
    seeds["bad_header_bare_lf"] = b"GET /api/info HTTP/1.1\nHost: x\nX: \x00\x01\n\n"
    seeds["bad_headers_unterminated"] = b"POST /api/tokenize HTTP/1.1\r\nContent-Length: 5\r\nX: y"
    seeds["bad_request_line"] = b"GET\r\n\r\n"
    seeds["bad_version"] = b"GET /api/info HTTP/9.9\r\n\r\n"
    seeds["bad_uri_too_long"] = get("/api/info?" + "a" * 9000)
    # body limits: 411, 413, 415
    body = json.dumps({"text": "hello world"}).encode()
    seeds["bad_chunked_body"] = (b"POST /api/tokenize HTTP/1.1\r\n" + HOST.encode() +
                                 b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
                                 chunked(body, [5, len(body) - 5]))
    seeds["bad_no_content_length"] = (b"POST /api/tokenize HTTP/1.1\r\n" + HOST.encode() +
                                      b"Content-Type: application/json\r\n\r\n" + body)
    seeds["bad_content_length_over_limit"] = (b"POST /api/attention HTTP/1.1\r\n" + HOST.encode() +
                                              b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n" +
                                              b'{"text": "' + b"a" * 200 + b'"}')
    seeds["bad_content_length_huge"] = (b"POST /api/attention HTTP/1.1\r\n" + HOST.encode() +
                                        b"Content-Length: 18446744073709551616\r\n\r\n{}")
    seeds["bad_gzip_body"] = post("/api/tokenize", gzip.compress(b'{"text": "' + b"a" * 20000 + b'"}', mtime=0),
                                  "Content-Encoding: gzip\r\n")
    seeds["bad_multipart"] = post("/api/tokenize",
                                  "--XX\r\nContent-Disposition: form-data; name=\"text\"\r\n\r\nhi\r\n--XX--\r\n",
                                  content_type="multipart/form-data; boundary=XX")
    # not found: 404 (routes exist only for the embedded assets and /api/)
    seeds["bad_unknown_api"] = get("/api/nope")
    seeds["bad_traversal"] = get("/../../etc/passwd")
    seeds["bad_traversal_encoded"] = get("/%2e%2e/%2e%2e/etc/passwd")
    seeds["bad_put"] = b"PUT /api/info HTTP/1.1\r\n" + HOST.encode() + b"Content-Length: 2\r\n\r\n{}"
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {OUT}, {sum(len(d) for d in seeds.values())} bytes")


if __name__ == "__main__":
    main()
