"""Key names of the contract."""

from __future__ import annotations

from redis.crc import key_slot

from seckill.infra import keys


def test_contract_key_names_share_the_voucher_hash_tag() -> None:
    assert keys.stock(42) == "seckill:stock:{42}"
    assert keys.buyers(42) == "seckill:order:{42}"
    assert keys.returned(42) == "seckill:returned:{42}"
    assert keys.edge(42) == "seckill:edge:{42}"
    voucher_keys = [
        keys.stock(42),
        keys.buyers(42),
        keys.window(42),
        keys.pending(42),
        keys.returned(42),
        keys.edge(42),
    ]
    assert all("{42}" in k for k in voucher_keys)
    # One cluster slot for the whole voucher, so the script runs on Redis Cluster too.
    assert len({key_slot(k.encode()) for k in voucher_keys}) == 1
    assert keys.login_token("abc") == "login:token:abc"
