FROM {env_image}
{ca_in}
COPY ./setup_repo.sh /root/
RUN sed -i -e 's/\r$//' /root/setup_repo.sh
RUN /bin/bash /root/setup_repo.sh
{ca_out}
WORKDIR /testbed/
LABEL org.anyswe.swebench.env={env_image}
