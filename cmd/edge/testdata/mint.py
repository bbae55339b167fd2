# Mints keys, JWK Sets and tokens with PyJWT (Debian python3-jwt), an
# implementation edge did not write, for edge's token tests.
#
#   mint.py genkey ec|rsa|ed PATH       writes a private key (PEM)
#   mint.py jwks KID:PATH...            prints the public JWK Set
#   mint.py token PATH KID CLAIMS_JSON  prints a token signed with PATH's key
import json
import sys

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm


def load(path):
    with open(path, "rb") as f:
        return serialization.load_pem_private_key(f.read(), password=None)


def alg_of(key):
    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256", RSAAlgorithm
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return "ES256", ECAlgorithm
    return "EdDSA", OKPAlgorithm


cmd = sys.argv[1]
if cmd == "genkey":
    kind, path = sys.argv[2], sys.argv[3]
    key = {"ec": lambda: ec.generate_private_key(ec.SECP256R1()),
           "rsa": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
           "ed": ed25519.Ed25519PrivateKey.generate}[kind]()
    with open(path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
elif cmd == "jwks":
    keys = []
    for spec in sys.argv[2:]:
        kid, path = spec.split(":", 1)
        key = load(path)
        alg, impl = alg_of(key)
        j = json.loads(impl.to_jwk(key.public_key()))
        j.update(kid=kid, alg=alg, use="sig")
        keys.append(j)
    print(json.dumps({"keys": keys}))
elif cmd == "token":
    path, kid, claims = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    key = load(path)
    alg, _ = alg_of(key)
    print(jwt.encode(claims, key, algorithm=alg, headers={"kid": kid}))
else:
    sys.exit("unknown command " + cmd)
