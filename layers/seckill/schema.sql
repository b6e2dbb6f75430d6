-- The hm-dianping voucher tables, plus the order table's UNIQUE (user_id, voucher_id)
-- and UNIQUE (payment_id) (one payment pays one order; NULLs, the unpaid, repeat freely)
-- and the record of orders the gate accepted but the database refused.
-- Every time is UTC.
CREATE TABLE IF NOT EXISTS tb_voucher (
  id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  shop_id      BIGINT UNSIGNED NOT NULL COMMENT 'shop id',
  title        VARCHAR(255)    NOT NULL COMMENT 'title',
  sub_title    VARCHAR(255)    NULL     COMMENT 'subtitle',
  rules        VARCHAR(1024)   NULL     COMMENT 'rules of use',
  pay_value    BIGINT UNSIGNED NOT NULL COMMENT 'price paid, in cents',
  actual_value BIGINT          NOT NULL COMMENT 'value worth, in cents',
  type         TINYINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '0 ordinary, 1 seckill',
  status       TINYINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '1 on sale, 2 withdrawn, 3 expired',
  create_time  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  update_time  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  KEY idx_shop (shop_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS tb_seckill_voucher (
  voucher_id   BIGINT UNSIGNED NOT NULL COMMENT 'tb_voucher.id',
  stock        INT             NOT NULL COMMENT 'remaining stock',
  create_time  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  begin_time   DATETIME(3)     NOT NULL COMMENT 'sale opens (UTC)',
  end_time     DATETIME(3)     NOT NULL COMMENT 'sale closes (UTC)',
  hold_seconds INT             NOT NULL DEFAULT 900 COMMENT 'how long a confirmed order stays payable',
  update_time  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (voucher_id),
  CONSTRAINT ck_stock_non_negative CHECK (stock >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS tb_voucher_order (
  id           BIGINT          NOT NULL COMMENT 'the order id the gate handed out',
  user_id      BIGINT UNSIGNED NOT NULL,
  voucher_id   BIGINT UNSIGNED NOT NULL,
  pay_type     TINYINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '1 balance, 2 alipay, 3 wechat',
  status       TINYINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '1 unpaid, 2 paid, 3 used, 4 cancelled, 5 refunding, 6 refunded',
  create_time  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3) COMMENT 'when the gate accepted it',
  pay_by       DATETIME(3)     NULL     COMMENT 'payment deadline (UTC): stored + the voucher hold',
  pay_time     DATETIME(3)     NULL,
  payment_id   VARCHAR(64)     NULL     COMMENT 'the payment that paid it',
  close_reason VARCHAR(16)     NULL     COMMENT 'EXPIRED or CANCELLED when status = 4',
  use_time     DATETIME(3)     NULL,
  refund_time  DATETIME(3)     NULL,
  update_time  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_user_voucher (user_id, voucher_id),
  UNIQUE KEY uk_payment (payment_id),
  KEY idx_voucher (voucher_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS tb_voucher_order_rejection (
  order_id     BIGINT          NOT NULL COMMENT 'the order id the gate handed out',
  user_id      BIGINT UNSIGNED NOT NULL,
  voucher_id   BIGINT UNSIGNED NOT NULL,
  reason       VARCHAR(32)     NOT NULL COMMENT 'DUPLICATE_ORDER, SOLD_OUT or VOUCHER_NOT_FOUND',
  create_time  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (order_id),
  KEY idx_voucher (voucher_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- A draw voucher's draw (docs/draw.md): its secret seed (revealed once the sale is
-- over), the commitment published at creation, its parameters, the late entries'
-- counter, and the at (epoch ms) of the draw clock's next message.
CREATE TABLE IF NOT EXISTS tb_draw (
  voucher_id    BIGINT UNSIGNED NOT NULL COMMENT 'tb_seckill_voucher.voucher_id',
  seed          BINARY(32)      NOT NULL COMMENT 'secret until the window is over or the sale stopped',
  commitment    CHAR(64)        NOT NULL COMMENT 'hex SHA-256 of the seed',
  admit_factor  INT             NOT NULL,
  close_seconds INT             NOT NULL,
  wave_seconds  INT             NOT NULL,
  admit_rate    INT             NULL     COMMENT 'the most entrants newly admitted in a second, NULL for no limit',
  close_time    DATETIME(3)     NOT NULL COMMENT 'the draw closes (UTC): begin_time - close_seconds',
  clock_at      BIGINT          NULL     COMMENT 'the at (epoch ms) the clock moves next, NULL once done',
  create_time   DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (voucher_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- One entry per voucher and user, with its ticket.
CREATE TABLE IF NOT EXISTS tb_draw_entry (
  voucher_id   BIGINT UNSIGNED NOT NULL,
  user_id      BIGINT UNSIGNED NOT NULL,
  ticket       CHAR(17) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '17 lowercase hex: 0 + HMAC before the close, 1 + sequence after',
  late         TINYINT(1)      NOT NULL,
  create_time  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (voucher_id, user_id),
  KEY idx_ticket (voucher_id, ticket)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- A draw's late entrants' sequence (seckill.draw.entrants): a late entry numbers itself
-- here, not under a lock on the draw's row, which the clock's moves take.
CREATE TABLE IF NOT EXISTS tb_draw_late (
  voucher_id   BIGINT UNSIGNED NOT NULL,
  late_count   INT             NOT NULL COMMENT 'entries after the close so far',
  PRIMARY KEY (voucher_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- A draw's entrants, counted as they enter (seckill.draw.entrants): the public record
-- sums these rows instead of counting the entries. Slots spread entries made at once.
CREATE TABLE IF NOT EXISTS tb_draw_entrants (
  voucher_id   BIGINT UNSIGNED NOT NULL,
  slot         TINYINT UNSIGNED NOT NULL COMMENT 'user_id % 16',
  entrants     INT             NOT NULL COMMENT 'the entries of this slot''s users',
  PRIMARY KEY (voucher_id, slot)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- The cursor's moves: each takes effect at at_ms and admits what it names. A paced
-- move is recorded as its steps, each a row.
CREATE TABLE IF NOT EXISTS tb_draw_move (
  voucher_id   BIGINT UNSIGNED NOT NULL,
  at_ms        BIGINT          NOT NULL COMMENT 'when the move takes effect (epoch ms)',
  cursor_after CHAR(17) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the cursor from at_ms on',
  admitted     INT             NOT NULL COMMENT 'entrants this move admitted',
  units        INT             NOT NULL COMMENT 'units on sale when it was decided',
  step         INT             NOT NULL DEFAULT 0 COMMENT 'a paced move: 0 for its first step, then 1, 2, ... one second apart',
  decide_time  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (voucher_id, at_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- The order-id counter's value after each recovery (seckill.repair.counter): blocks
-- leased since then lie above it, and MySQL's orders may not show them yet, so the
-- next recovery of the same UTC day raises the counter above this too.
CREATE TABLE IF NOT EXISTS tb_order_counter_floor (
  day          DATE            NOT NULL COMMENT 'the UTC day of the counter',
  floor        BIGINT UNSIGNED NOT NULL COMMENT 'the sequence the counter stood at after the recovery',
  update_time  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (day)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
