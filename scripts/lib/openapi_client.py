"""The Swift client's generated code (Clients/Swift/Sources/FoodBackendAPI), from docs/openapi.json.

  client           build swift-openapi-generator (Clients/Swift/Generator, once) and write the code
  client --check   exit 1 unless the committed code is what docs/openapi.json generates: the stamp
                   beside the code names the document's, the configuration's and each file's SHA-256,
                   so a changed document or a hand-edited file fails without building the generator
  client --check --regenerate   the same, by generating again into a temporary folder and comparing
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLIENT = os.path.join(ROOT, "Clients", "Swift")
DOCUMENT = os.path.join(ROOT, "docs", "openapi.json")
CONFIG = os.path.join(CLIENT, "openapi-generator-config.yaml")
GENERATOR_PACKAGE = os.path.join(CLIENT, "Generator")
OUTPUT = os.path.join(CLIENT, "Sources", "FoodBackendAPI")
STAMP = os.path.join(CLIENT, "openapi-generated.sha256")


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _generator():
    subprocess.run(["swift", "build", "--package-path", GENERATOR_PACKAGE, "--product", "swift-openapi-generator"], check=True,
                   stdout=sys.stderr)
    binary = subprocess.run(["swift", "build", "--package-path", GENERATOR_PACKAGE, "--show-bin-path"], check=True, capture_output=True,
                            text=True).stdout.strip()
    return os.path.join(binary, "swift-openapi-generator")


def _generate(into):
    subprocess.run([_generator(), "generate", "--config", CONFIG, "--output-directory", into, DOCUMENT], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return sorted(name for name in os.listdir(into) if name.endswith(".swift"))


def _stamp_lines(files, folder):
    lines = [f"{_sha256(DOCUMENT)}  docs/openapi.json", f"{_sha256(CONFIG)}  Clients/Swift/openapi-generator-config.yaml"]
    lines += [f"{_sha256(os.path.join(folder, name))}  {name}" for name in files]
    return "\n".join(lines) + "\n"


def write():
    with tempfile.TemporaryDirectory() as scratch:
        files = _generate(scratch)
        for name in os.listdir(OUTPUT):
            if name.endswith(".swift"):
                os.remove(os.path.join(OUTPUT, name))
        for name in files:
            shutil.copyfile(os.path.join(scratch, name), os.path.join(OUTPUT, name))
    with open(STAMP, "w") as f:
        f.write(_stamp_lines(files, OUTPUT))
    print(f"wrote {len(files)} files to {os.path.relpath(OUTPUT, ROOT)}")
    return 0


def check(regenerate):
    committed = sorted(name for name in os.listdir(OUTPUT) if name.endswith(".swift"))
    try:
        with open(STAMP) as f:
            stamp = f.read()
    except FileNotFoundError:
        print(f"no {os.path.relpath(STAMP, ROOT)}: run scripts/openapi client")
        return 1
    if stamp != _stamp_lines(committed, OUTPUT):
        print("the Swift client's generated code is not what docs/openapi.json generates (the document or the code changed): "
              "run scripts/openapi client")
        return 1
    if regenerate:
        with tempfile.TemporaryDirectory() as scratch:
            files = _generate(scratch)
            differing = [name for name in set(files) | set(committed)
                         if name not in files or name not in committed
                         or _sha256(os.path.join(scratch, name)) != _sha256(os.path.join(OUTPUT, name))]
        if differing:
            print(f"the generator writes other code than is committed ({', '.join(sorted(differing))}): run scripts/openapi client")
            return 1
    print("the Swift client's generated code is docs/openapi.json's")
    return 0


def main(arguments):
    if arguments == []:
        return write()
    if arguments[:1] == ["--check"] and arguments[1:] in ([], ["--regenerate"]):
        return check(regenerate=arguments[1:] == ["--regenerate"])
    print(__doc__)
    return 2
