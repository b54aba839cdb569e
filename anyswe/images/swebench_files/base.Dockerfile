FROM {debian_image}

ARG DEBIAN_FRONTEND=noninteractive
ENV TZ=Etc/UTC

RUN apt-get update && apt-get install -y --no-install-recommends \
wget \
git \
build-essential \
libffi-dev \
libtiff-dev \
python3 \
python3-dev \
python3-pip \
python-is-python3 \
jq \
curl \
locales \
locales-all \
tzdata \
&& rm -rf /var/lib/apt/lists/*

# Debian 12 marks its python externally managed (PEP 668); conda's env, which this stands in for, is not.
RUN rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
# A new conda env holds no packages but python's own: Debian's pytest (anyswe/base has it for the demo
# tasks) would satisfy a spec's `pytest` at 6.0.2 and give no `pytest` command.
RUN apt-get purge -y --auto-remove python3-pytest
# setuptools' own distutils puts a `setup.py develop` (pip's `install -e` of a project without PEP 660
# hooks: pylint 2.x, sphinx 3.x) into /usr/lib/python3.X/site-packages, which Debian's python never reads;
# conda's python reads the site-packages it was installed to.
RUN py=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
 && mkdir -p "/usr/lib/python$py/site-packages" "/usr/local/lib/python$py/dist-packages" \
 && echo "import site; site.addsitedir('/usr/lib/python$py/site-packages')" \
    > "/usr/local/lib/python$py/dist-packages/anyswe-site-packages.pth"
# The conda stand-in (see anyswe/images/swebench_build.py), where Miniconda would be.
COPY ./activate /opt/miniconda3/bin/activate
COPY ./conda /opt/miniconda3/bin/conda
RUN mkdir -p /opt/miniconda3/etc/profile.d /opt/miniconda3/envs \
 && ln -s ../../bin/activate /opt/miniconda3/etc/profile.d/conda.sh && chmod 0755 /opt/miniconda3/bin/conda
ENV PATH=/opt/miniconda3/bin:$PATH
# What `conda init --all` does for bash.
RUN echo "source /opt/miniconda3/etc/profile.d/conda.sh" >> /root/.bashrc

RUN adduser --disabled-password --gecos 'dog' nonroot
