-- Mail to an address is found in any case whatever the database's locale: under the C locale
-- lower() leaves every letter outside ASCII as it is ('Ünal' stays 'Ünal'), so an address the
-- service lowercased ('ünal', as addresses are compared) found no mail, and an unsubscribe or a
-- deletion left it to go out. lower() under ICU's root locale lowers every letter, as the service
-- does.
CREATE INDEX mail_outbox_recipient_any_case ON mail_outbox (lower(recipient COLLATE "und-x-icu"));
