FROM {env_image}
COPY ./setup_repo.sh /root/
RUN {git_env}/bin/bash /root/setup_repo.sh

WORKDIR /testbed/
LABEL org.anyswe.swebench.env={env_image}
LABEL org.anyswe.differs="{differs}"
