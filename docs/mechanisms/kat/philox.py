"""Philox4x32-10 known answers (randomness.md), pure Python, for checking an implementation.

Run: python philox.py            -> prints the three Random123 test vectors and checks them
     python philox.py K0 K1 C0 C1 C2 C3  (hex words) -> prints the 4 output words
"""
import sys

M0, M1 = 0xD2511F53, 0xCD9E8D57  # round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments
MASK = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK, p1 & MASK, ((p0 >> 32) ^ c3 ^ k1) & MASK, p0 & MASK
        k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
    return c0, c1, c2, c3


def uniform52(hi, lo):
    """float64 on the open interval (0, 1) from 64 bits hi:lo, as randomness.md states."""
    x = (hi << 32) | lo
    return ((x >> 12) + 0.5) * 2.0**-52


VECTORS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((MASK,) * 4, (MASK, MASK), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]

if __name__ == "__main__":
    if len(sys.argv) == 7:
        k0, k1, *c = (int(a, 16) for a in sys.argv[1:])
        print(" ".join(f"{w:08x}" for w in philox4x32_10(tuple(c), (k0, k1))))
        sys.exit(0)
    for ctr, key, want in VECTORS:
        got = philox4x32_10(ctr, key)
        print(" ".join(f"{w:08x}" for w in got), "ok" if got == want else "MISMATCH")
        assert got == want
    print("uniform52(0, 0) =", uniform52(0, 0), "; uniform52(MASK, MASK) =", uniform52(MASK, MASK))
