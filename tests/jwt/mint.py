"""Keys and tokens for tests/jwt*.rs, made with PyJWT and cryptography.

    mint.py keys DIR    writes DIR/NAME.key (private PEM), DIR/NAME.pub
                        (public PEM) and DIR/NAME.jwk (public JWK, JSON) for
                        rsa, rsa_other, ec256, ec384, ed25519
    mint.py tokens DIR  reads a JSON list of token specs on stdin and writes
                        the list of tokens on stdout

A spec: {"alg", "key" (a key name, or "secret" for DIR/secret), "claims",
"headers"?}. Two specs forge what no honest library makes: "alg": "none"
(an unsigned token) and "forge_hmac_with": NAME (an HS256 token whose
secret is the bytes of NAME's public key PEM, the old alg-confusion attack).
"""

import base64
import hashlib
import hmac
import json
import os
import sys

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def keys(out):
    made = {
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "rsa_other": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "ec256": ec.generate_private_key(ec.SECP256R1()),
        "ec384": ec.generate_private_key(ec.SECP384R1()),
        "ed25519": ed25519.Ed25519PrivateKey.generate(),
    }
    for name, key in made.items():
        with open(os.path.join(out, name + ".key"), "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        public = key.public_key()
        with open(os.path.join(out, name + ".pub"), "wb") as f:
            f.write(public.public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo))
        if name.startswith("rsa"):
            jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
        elif name.startswith("ec"):
            jwk = ECAlgorithm.to_jwk(public, as_dict=True)
        else:
            jwk = OKPAlgorithm.to_jwk(public, as_dict=True)
        with open(os.path.join(out, name + ".jwk"), "w") as f:
            json.dump(jwk, f)
    with open(os.path.join(out, "secret"), "wb") as f:
        f.write(os.urandom(32).hex().encode())


def token(out, spec):
    claims = spec["claims"]
    headers = spec.get("headers") or {}
    if spec.get("alg") == "none":
        head = dict({"alg": "none", "typ": "JWT"}, **headers)
        return b64(json.dumps(head).encode()) + "." + b64(json.dumps(claims).encode()) + "."
    if "forge_hmac_with" in spec:
        with open(os.path.join(out, spec["forge_hmac_with"] + ".pub"), "rb") as f:
            secret = f.read()
        head = dict({"alg": "HS256", "typ": "JWT"}, **headers)
        signing = b64(json.dumps(head).encode()) + "." + b64(json.dumps(claims).encode())
        mac = hmac.new(secret, signing.encode(), hashlib.sha256).digest()
        return signing + "." + b64(mac)
    name = spec["key"]
    path = os.path.join(out, "secret" if name == "secret" else name + ".key")
    with open(path, "rb") as f:
        key = f.read()
    return jwt.encode(claims, key, algorithm=spec["alg"], headers=headers or None)


def main():
    cmd, out = sys.argv[1], sys.argv[2]
    if cmd == "keys":
        keys(out)
    elif cmd == "tokens":
        specs = json.load(sys.stdin)
        json.dump([token(out, s) for s in specs], sys.stdout)
    else:
        sys.exit("usage: mint.py keys|tokens DIR")


if __name__ == "__main__":
    main()
