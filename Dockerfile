# choir in a container: `choir serve` on port 8000 with the models of /models.
# deploy/k8s runs this image as choir:latest.
#
#   docker build -t choir .                                   # CPU
#   docker build -t choir:cuda --build-arg CUDA=ON .           # + the CUDA backend (sm_90)
#   docker run --rm -p 8000:8000 -v ~/models:/models:ro choir
#   docker run --rm --gpus all -p 8000:8000 -v ~/models:/models:ro choir:cuda
#
# Both stages install their packages with the project's own scripts/setup.sh
# (as root: a fresh Debian container has no sudo, and needs none).
ARG DEBIAN=debian:12-slim

FROM ${DEBIAN} AS build
ARG CUDA=OFF
WORKDIR /src
COPY scripts/setup.sh scripts/setup.sh
RUN ./scripts/setup.sh --build $([ "$CUDA" = ON ] && echo --cuda) && rm -rf /var/lib/apt/lists/*
COPY . .
ENV PATH=/usr/local/cuda/bin:$PATH
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCHOIR_CUDA=$CUDA \
 && cmake --build build -j "$(nproc)" --target choir_cli \
 && build/choir --version

FROM ${DEBIAN}
ARG CUDA=OFF
COPY scripts/setup.sh /tmp/setup.sh
RUN /tmp/setup.sh --runtime $([ "$CUDA" = ON ] && echo --cuda) && rm -rf /var/lib/apt/lists/* /tmp/setup.sh \
 && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin choir \
 && mkdir -p /models
COPY --from=build /src/build/choir /usr/local/bin/choir
ENV LD_LIBRARY_PATH=/usr/local/cuda/lib64
USER choir
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s CMD curl -fsS http://127.0.0.1:8000/health || exit 1
ENTRYPOINT ["choir"]
CMD ["serve", "--models", "/models", "--host", "0.0.0.0", "--port", "8000"]
