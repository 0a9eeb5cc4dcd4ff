"""Trust an extra CA bundle in this process, for native TLS clients too (a private Daytona's storage).

Invariant: inside `trust_in_this_process(bundle)` every TLS client built in this process
(OpenSSL, obstore) trusts `bundle`; afterwards SSL_CERT_FILE is what it was. Exporting
SSL_CERT_FILE is not enough for the daytona SDK: it builds its S3 client (obstore) inside
`isolated_env()`, which empties `os.environ`, so only a variable set beneath `os.environ`
(`os.putenv`) reaches obstore's certificate loader. The bundle should include the system roots.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

CERT_ENV = "SSL_CERT_FILE"


@contextmanager
def trust_in_this_process(bundle: Path) -> Iterator[None]:
    """Native TLS clients built inside the block (obstore, OpenSSL) trust `bundle`.

    Sets SSL_CERT_FILE beneath `os.environ` (which no longer lists it while the block runs) and
    restores the previous value afterwards.
    """
    if not Path(bundle).is_file():
        raise FileNotFoundError(f"no CA bundle at {bundle} (is the sim started?)")
    previous = os.environ.pop(CERT_ENV, None)
    os.putenv(CERT_ENV, str(bundle))
    try:
        yield
    finally:
        if previous is None:
            os.unsetenv(CERT_ENV)
        else:
            os.environ[CERT_ENV] = previous
