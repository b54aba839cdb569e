FROM {debian_image}

ARG DEBIAN_FRONTEND=noninteractive
ENV TZ=Etc/UTC

# swebench 4.1.0's _DOCKERFILE_BASE_C on Debian 12 in place of ubuntu:22.04 (its deb-src line is for
# Ubuntu's sources.list and nothing here uses it). The same packages, with recommends, as it installs them.
RUN apt-get update && \
    apt-get install -y wget git build-essential libtool automake autoconf tcl bison flex cmake python3 python3-pip python3-venv python-is-python3 && \
    rm -rf /var/lib/apt/lists/*

RUN adduser --disabled-password --gecos 'dog' nonroot
