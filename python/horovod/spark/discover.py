"""Elastic host discovery for horovod.spark.run_elastic: horovodrun runs this as its
--host-discovery-script; it prints the live Spark tasks' hosts, `host_hash:slots` per line,
as the driver service knows them."""
import os
import sys

from horovod.spark import wire


def main():
    try:
        chan = wire.connect_any(wire.parse_addresses(os.environ["HVD_SPARK_DRIVER"]),
                                bytes.fromhex(os.environ["HVD_SPARK_SECRET"]),
                                wire.HANDSHAKE_TIMEOUT_S)
        chan.send(wire.HOSTS_REQ)
        kind, text = chan.recv(timeout=wire.HANDSHAKE_TIMEOUT_S)
        chan.close()
    except (KeyError, wire.WireError) as e:
        sys.exit(f"horovod.spark discovery: {e}")
    sys.stdout.write(text.decode())


if __name__ == "__main__":
    main()
