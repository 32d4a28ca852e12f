"""Print KV event batches encoded by Python's msgpack, one hex payload per
line, shaped as vLLM (arrays and 0.26 maps), SGLang and tokenspeed send them."""
import msgpack

tokens = list(range(1, 33))
payloads = [
    # vLLM 0.26 map form.
    [1789095808.84, [{"type": "BlockStored", "block_hashes": [15760518052499183552, 2],
                      "parent_block_hash": None, "token_ids": tokens, "block_size": 16,
                      "lora_id": None, "medium": "GPU", "lora_name": None,
                      "extra_keys": [None, None], "group_idx": 0,
                      "kv_cache_spec_kind": "full_attention"}], 0],
    # vLLM tagged arrays with int hashes, then a remove and a clear.
    [1.5, [["BlockStored", [101, 102], None, tokens, 16, None, "GPU"],
           ["BlockRemoved", [102], "GPU"], ["AllBlocksCleared"]], 1],
    # SGLang: signed hashes and a cache-salt map in the LoRA slot.
    [2.5, [["BlockStored", [-5, -6], -4, tokens, 16, None, None, {"cache_salt": "t"}]], 0],
    # bytes hashes (use_bin_type) and a tokenspeed map batch.
    {"ts": 3.5, "events": [["BlockStored", [b"\x00" * 24 + (101).to_bytes(8, "big"), b"\x01\x02"],
                            None, tokens, 16]], "attn_dp_rank": 2},
]
for p in payloads:
    print(msgpack.packb(p, use_bin_type=True).hex())
