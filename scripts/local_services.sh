#!/usr/bin/env bash
# Make sure the local Redis and MariaDB the project runs against are up.
# Starts whichever is down (Debian packages: redis-server, mariadb-server).
set -euo pipefail

redis_up() { (exec 3<>/dev/tcp/127.0.0.1/6379 && printf 'PING\r\n' >&3 && head -c 5 <&3 | grep -q PONG) 2>/dev/null; }
mysql_up() { (exec 3<>/dev/tcp/127.0.0.1/3306) 2>/dev/null; }

wait_for() {
  local name=$1 check=$2
  for _ in $(seq 1 60); do
    if $check; then return 0; fi
    sleep 0.5
  done
  echo "$name did not come up on 127.0.0.1" >&2
  return 1
}

if ! redis_up; then
  if ! command -v redis-server >/dev/null; then
    echo "Redis is not running on 127.0.0.1:6379 and redis-server is not installed (apt-get install redis-server)" >&2
    exit 2
  fi
  echo "starting Redis on 127.0.0.1:6379"
  mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp --logfile /tmp/seckill-redis.log
  wait_for Redis redis_up
fi

if ! mysql_up; then
  if [ ! -x /usr/sbin/mariadbd ]; then
    echo "MariaDB is not running on 127.0.0.1:3306 and /usr/sbin/mariadbd is not installed (apt-get install mariadb-server)" >&2
    exit 2
  fi
  echo "starting MariaDB on 127.0.0.1:3306"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  wait_for MariaDB mysql_up
fi
