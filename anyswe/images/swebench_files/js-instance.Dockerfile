FROM {env_image}

COPY ./setup_repo.sh /root/
RUN sed -i -e 's/\r$//' /root/setup_repo.sh
RUN node -v
RUN npm -v
{ca_in}
RUN {git_env}/bin/bash /root/setup_repo.sh
{ca_out}

WORKDIR /testbed/
LABEL org.anyswe.swebench.env={env_image}
LABEL org.anyswe.differs="{differs}"
