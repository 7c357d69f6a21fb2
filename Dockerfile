# One image for every role of the local stack (docker-compose.yml): topics, bridge,
# worker, publish, and `serve` (the default: the fleet page of an example trace).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/faultline
# Dependencies first (against an empty package), so a code change does not reinstall them;
# Faust, mode, aiokafka and kafka-python at the versions of constraints.txt (the ones
# app/stream/faust_fixes.py was written against).
COPY pyproject.toml README.md constraints.txt ./
RUN mkdir app && touch app/__init__.py \
    && pip install -c constraints.txt ".[stream,bridge]" && pip uninstall -y faultline && rm -rf app build
COPY app ./app
RUN pip install --no-deps .
COPY examples ./examples

RUN useradd --create-home --uid 10001 faultline && mkdir /data && chown faultline /data
USER faultline
ENV FAULTLINE_DATA_DIR=/data

EXPOSE 6066 8080
CMD ["faultline", "serve", "--trace", "examples/traces/mixed.jsonl", "--host", "0.0.0.0", "--port", "8080"]
