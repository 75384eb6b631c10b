# The compactor CLI in an image, for the scheduler and workers of localstack/*.yml:
#   docker build -t compactor:local .
#   docker run --rm compactor:local worker --help
# build-essential compiles the key-buffer kernel (worker/kernel/_keybuffer.c), a block's
# per-section passes (fileformat/_sections.c) and the batch encoder
# (fileformat/_encoder.cpp, against the pinned pyarrow's Arrow C++); with libssl-dev the
# kernel's SHA-512/256 uses OpenSSL, without it the portable C; with libzstd-dev the
# encoder keeps one zstd context per stream writer and the reader one per thread, without
# it Arrow's codec (setup.py). The base image's interpreter is built with profile-guided
# and link-time optimization, which the compactor's Python glue needs: the same code ran
# 6-14% faster on such a build than on a plain one (bench/README.md, "The interpreter's
# build").
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential libssl-dev libzstd-dev libisal-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
# The pinned closure first (its own layer, rebuilt only when the lock changes), then the
# package alone, as the Makefile does (but not editable: the wheel copies every layer
# folder under compactor/).
COPY requirements.lock ./
RUN pip install --no-cache-dir "pip==26.3" \
    && pip install --no-cache-dir -r requirements.lock
COPY . .
RUN pip install --no-cache-dir --no-deps --no-build-isolation . \
    && cd / && compactor --help >/dev/null

RUN useradd --create-home compactor
USER compactor
WORKDIR /home/compactor
ENTRYPOINT ["compactor"]
CMD ["--help"]
