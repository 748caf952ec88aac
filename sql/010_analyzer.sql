-- pgfunnel: the analyzer. One implementation, used at ingest and at query time,
-- so that what a query is matched against is exactly what was indexed.
--
-- Rules (analyzer english_v1; simple_v1 is the same without stemming and stop words):
--   * lower-case; a token is a run of letters/digits joined by '.', '_' or '-'
--     (jsonb_path_exists, os.path.join, err-4029 are one token each)
--   * a token joined by '.' or '_' is an identifier: it is kept whole (unstemmed)
--     and its parts are indexed too, so the exact identifier outranks its parts
--   * a token joined by '-' is kept joined without the hyphens (err-4029 -> err4029)
--     and its parts are indexed too
--   * a part mixing letters and digits is kept whole and split at letter/digit
--     boundaries, so ERR-4029, err 4029 and err4029 share the terms err and 4029
--   * alphabetic parts are stemmed (english snowball); stop words are dropped
--   * query side only: question words and question glue are dropped where they frame the
--     question (_frames_question)
--   * english_v2 and simple_v2 also index the inner names of a dotted identifier: each
--     segment that is itself a compound (quote_all in csv.quote_all) and each run of two
--     or more segments short of the whole (os.path and path.join in os.path.join), so a
--     name typed with less qualification than the text gives it still matches whole
--   * english_v3 and simple_v3 (the v2 rules) first fold Unicode (_unicode_fold): one
--     visible text has one set of terms whether it came composed or decomposed (macOS
--     and some HTML write é as e + a combining accent), in full-width or ligature forms,
--     or with invisible soft hyphens and zero-width characters inside its words
--   * english_v4 and simple_v4 (the v3 rules) also read each run of Han, Hiragana or
--     Katakana characters as its overlapping pairs of characters (_character_pairs): those
--     scripts put no space between words, so under v3 a whole sentence was one term
--   * english_v5 and simple_v5 (the v4 rules) also read each run of Hangul inside a word
--     as its pairs: Korean writes a word's particles and endings onto it (데이터베이스를,
--     "the database" as an object), so under v4 the bare word found none of its forms
--   * english_v6 and simple_v6 (the v5 rules) say what a word is themselves rather than
--     asking the database's locale: a letter, mark or digit of any script (Unicode
--     categories L, M, N; _nonword_chars). Under a "C" collation Postgres' [[:alnum:]]
--     holds ASCII only (café became caf, Greek or Chinese nothing), and no locale counts
--     every mark a word is written with (Thai tone marks, the Hindi virama split words).
--     They lower case under a collation that knows non-ASCII letters whatever the
--     database's is, and read each run of Thai, Lao, Burmese or Khmer as its pairs of
--     characters, as v4 reads Chinese: those scripts put no space between words
--   * english_v7 and simple_v7 (the v6 rules) read the Unicode hyphens and dashes a word
--     processor or a web page puts inside identifiers (_unicode_fold: hyphen, non-breaking
--     hyphen, figure dash, en dash, minus sign) as '-': ERR-4029 copied from a page that
--     wrote it with a non-breaking hyphen gets the terms of ERR-4029, and a query typed
--     either way finds the other
--   * english_v8 and simple_v8 (the v7 rules) keep the underscores that open or close an
--     identifier (_exit, __init__, __all__, class_) and the runs of them inside one
--     (author__name): such a token is an identifier, indexed whole with its underscores
--     (unstemmed) and in its parts, so `__init__` outranks a chunk that only says `init`,
--     and `__all__` (whose part is a stop word) is a term at all. Before v8 the
--     underscores were not part of the token: `__init__` was `init`, `__future__` the stem
--     `futur`, `sys.__stdout__` the two words `sys` and `stdout`. A lone `_` or `__` is no
--     token, and a run of five or more underscores (a fill-in blank) separates words
--   * german_v8 is english_v8 with German's snowball stemmer and stop words (german_stem)
--     in place of English's, and each term's accents folded after stemming
--     (_fold_accents): the stemmer reads the word as written and folds ä, ö, ü and ß
--     itself (`Größe`, `Grösse` and `Groesse` are `gross`); the fold takes the accents
--     of other letters off the term (`Café` -> `cafe`, where the stemmer reads `Cafe`
--     as `caf`: a spelling without them meets the text only where the stemmer reads
--     both alike). Queries drop German's question words and glue besides English's
--     (_german_question_words: `warum`, `wo finde ich`, `was bedeutet`), as a query-side
--     rule that changes nothing indexed. (A french_v8 built the same way was measured and
--     not offered: docs/tuning.md)

-- analyzers this version of pgfunnel knows; a new name is a new index version
create or replace function pgfunnel.analyzers()
returns table (name text, stem_dictionary text, description text)
language plpgsql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    return query
    values ('english_v1'::text, 'english_stem'::text, 'identifier-aware, english snowball stemming, english stop words'::text),
           ('simple_v1',  'simple',       'identifier-aware, no stemming, no stop words'),
           ('english_v2', 'english_stem', 'english_v1, and the inner names of dotted identifiers'),
           ('simple_v2',  'simple',       'simple_v1, and the inner names of dotted identifiers'),
           ('english_v3', 'english_stem', 'english_v2, with Unicode folded (NFKC, no soft hyphens or zero-width characters)'),
           ('simple_v3',  'simple',       'simple_v2, with Unicode folded (NFKC, no soft hyphens or zero-width characters)'),
           ('english_v4', 'english_stem', 'english_v3, with Chinese and Japanese text indexed as pairs of characters'),
           ('simple_v4',  'simple',       'simple_v3, with Chinese and Japanese text indexed as pairs of characters'),
           ('english_v5', 'english_stem', 'english_v4, with Korean words also indexed as pairs of characters'),
           ('simple_v5',  'simple',       'simple_v4, with Korean words also indexed as pairs of characters'),
           ('english_v6', 'english_stem', 'english_v5, with words of every script read alike whatever the database locale, and Thai, Lao, Burmese and Khmer indexed as pairs of characters'),
           ('simple_v6',  'simple',       'simple_v5, with words of every script read alike whatever the database locale, and Thai, Lao, Burmese and Khmer indexed as pairs of characters'),
           ('english_v7', 'english_stem', 'english_v6, with the Unicode hyphens, en dash and minus sign inside words read as hyphens'),
           ('simple_v7',  'simple',       'simple_v6, with the Unicode hyphens, en dash and minus sign inside words read as hyphens'),
           ('english_v8', 'english_stem', 'english_v7, with identifiers that open or close with underscores (__init__, _exit) indexed whole with them'),
           ('simple_v8',  'simple',       'simple_v7, with identifiers that open or close with underscores (__init__, _exit) indexed whole with them'),
           ('german_v8',  'german_stem',  'english_v8 with german snowball stemming and stop words, accents folded after stemming');
end
$$;

-- words that only frame a question; dropped from queries, never from documents
create or replace function pgfunnel._question_words()
returns text[]
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select array['what', 'whats', 'how', 'why', 'when', 'where', 'which', 'who', 'whom', 'whose',
                 'does', 'do', 'did', 'is', 'are', 'was', 'were', 'can', 'could', 'would',
                 'should', 'will', 'shall', 'may', 'might', 'must', 'i', 'me', 'my', 'we', 'us',
                 'you', 'your', 'mean', 'means', 'meaning', 'explain', 'tell', 'please', 'there',
                 'any', 'a', 'an', 'the', 'to', 'of', 'in', 'on', 'for', 'about', 'with', 'and',
                 'or', 'it', 'its', 'this', 'that', 'be']::text[]
$$;

-- German's question words that also name things (`wo finde ich`, `gibt es`, `darf ich`
-- frame a question, `Dateien, die gelöscht werden dürfen` names a thing): one list, which
-- _german_question_words and _naming_question_words both take in. The modals' other persons
-- and moods (`könnten wir`, `sollten wir`) are here, and the stop words `können`, `könnte`
-- typed without their umlauts.
create or replace function pgfunnel._german_naming_question_words()
returns text[]
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select array['kannst', 'darf', 'dürfen', 'durfen', 'duerfen', 'müssen', 'mussen',
                 'muessen', 'muß', 'möchte', 'mochte', 'moechte', 'sollen', 'bitte', 'gibt',
                 'finde', 'mache', 'zeige', 'zeig', 'erkläre', 'erklare', 'erklaere',
                 'erklären', 'erklaren', 'erklaeren', 'bedeutet', 'bedeuten', 'bedeutung',
                 'konnen', 'koennen', 'konnte', 'koennte',
                 'könnt', 'konnt', 'koennt', 'könnten', 'konnten', 'koennten', 'könntest',
                 'konntest', 'koenntest', 'sollten', 'solltest', 'sollst', 'möchten',
                 'mochten', 'moechten', 'möchtest', 'mochtest', 'moechtest', 'musst',
                 'müsste', 'musste', 'muesste', 'willst', 'darfst', 'gibts']::text[]
$$;

-- German's question words and question glue, which the German analyzers drop from queries
-- besides English's (_question_words(analyzer)): the interrogatives (`warum`, `wieso`,
-- `wann`, `wofür`), and the pronouns, articles and modals that frame a question (`wie kann
-- ich`, `was ist`, `wo finde ich`, `gibt es`). Many are German stop words, dropped anyway;
-- they are listed so that the question's opening run reads as one (`wo finde ich die
-- Konfiguration`: `finde` stands in it, after `wo`). Each with an umlaut or ß is listed as
-- typed without it too (`wofur`, `wofuer`), as a keyboard without them writes it. The
-- words that also name things (`finde`, `gibt`, `bitte`, `erkläre`, the modals that are no
-- stop words, `bedeutet` as `mean`) are _german_naming_question_words, which
-- _naming_question_words takes in too, so they are dropped only by where they stand
-- (_frames_question). Chosen from the language, not from a benchmark's question
-- templates: `suche` (`ich suche:`) and `befehl` (`welcher Befehl für`) are searched.
create or replace function pgfunnel._german_question_words()
returns text[]
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select array['wie', 'was', 'wo', 'warum', 'wieso', 'weshalb', 'weswegen', 'wann', 'wer',
                 'wen', 'wem', 'wessen', 'welche', 'welcher', 'welches', 'welchen', 'welchem',
                 'wozu', 'wofür', 'wofur', 'wofuer', 'womit', 'wodurch', 'woran', 'worauf',
                 'worin', 'woher', 'wohin', 'wovon', 'worüber', 'woruber', 'worueber',
                 'wonach', 'wovor', 'wogegen', 'woraus', 'worunter', 'wobei', 'wieviel',
                 'wieviele', 'inwiefern',
                 'ich', 'man', 'wir', 'du', 'mir', 'mich', 'mein', 'meine', 'meinen', 'meinem',
                 'meiner', 'es', 'ist', 'sind', 'der', 'die', 'das', 'den', 'dem', 'des', 'ein',
                 'eine', 'einen', 'einem', 'einer', 'kann', 'können', 'könnte', 'soll', 'sollte',
                 'muss', 'will', 'wird', 'werden']::text[]
           || pgfunnel._german_naming_question_words()
$$;

-- the question words an analyzer drops from queries: English's under every analyzer (a
-- German team asks in English too), German's besides under the German ones
create or replace function pgfunnel._question_words(analyzer text)
returns text[]
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select pgfunnel._question_words()
           || case when analyzer like 'german\_%' then pgfunnel._german_question_words()
                   else '{}'::text[] end
$$;

-- the question words that also name things (`mean`, `explain`, `may`, `us`): the only ones
-- dropped or searched by where they stand (_frames_question)
create or replace function pgfunnel._naming_question_words()
returns text[]
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select array['mean', 'means', 'meaning', 'explain', 'tell', 'please', 'us', 'may', 'might',
                 'will', 'shall', 'must', 'can', 'could', 'would', 'should', 'any']::text[]
           || pgfunnel._german_naming_question_words()
$$;

-- Whether a question word at `token_position` of a query frames the question rather than
-- being what it asks about; first_content and last_content are the positions of the
-- query's first and last tokens that are not question words (NULL: it has none), first_do
-- that of its first `do`, `does` or `did`. Glue
-- (`what`, `how`, `is`, `the`, `you`) frames a question wherever it stands. Words that
-- are also names of things frame one only where questions put them: a request (`explain`,
-- `tell`, `please`) or a modal (`can`, `may`, `will`, `us`, `any`) in the run of question
-- words that opens it (`can you explain`, `how may I`); `mean` in that run after its
-- first word (`what is the meaning of`, `what do you mean by`) or closing a question
-- asked with `do` (`what does ERR-4029 mean`). Elsewhere they are searched: `Greenwich
-- Mean Time`, `what is the arithmetic mean`, `mean squared error`, `which rows may be
-- locked` (a query opening with a request is read as one: `explain WITH`, so `explain
-- analyze` loses `explain`; written in capitals it is kept, below).
create or replace function pgfunnel._frames_question(word text, token_position integer,
                                                     first_content integer,
                                                     last_content integer, first_do integer)
returns boolean
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select case
               -- (`was bedeutet ERR-4029`: after the first word of the opening run)
               when word in ('mean', 'means', 'meaning', 'bedeutet', 'bedeuten', 'bedeutung')
                   then first_content is null
                        or (token_position > 1 and token_position < first_content)
                        -- closing a question asked with `do`: `what is the arithmetic
                        -- mean` asks about the mean
                        or (token_position > last_content
                            and coalesce(first_do < first_content, false))
               when word = any (pgfunnel._naming_question_words())
                   then first_content is null or token_position < first_content
               else true
           end
$$;

-- The words of each input written in capitals (two or more letters, upper case) in a
-- text that also holds lower case, as `ordinal:word` in lower case: `EXPLAIN ANALYZE`,
-- `US tax` or `use IN with a subquery` name a command, a country or a keyword, which a
-- question word never is. A text in capitals throughout says nothing by it.
create or replace function pgfunnel._capitalised_words(inputs text[])
returns text[]
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select coalesce(array_agg(distinct i.ord || ':' || lower(w.m[1])), '{}')
      from unnest(inputs) with ordinality as i(txt, ord),
           regexp_matches(i.txt, '\m([A-Z]{2,})\M', 'g') as w(m)
     where i.txt ~ '[a-z]'
$$;

-- each text in the form v3 analyzers read: Unicode compatibility normalization (NFKC:
-- composed accents, `ﬁ` as `fi`, full-width `ｒｅｆ` as `ref`), then without the
-- characters that are invisible inside a word (soft hyphen, zero-width space, non-joiner
-- and joiner, word joiner, byte-order mark), which would otherwise split it. A database
-- whose encoding is not UTF-8 holds no text to fold (Postgres normalizes only UTF-8).
--
-- With `dashes` (v7 analyzers), the Unicode hyphens and dashes that stand where a '-' was
-- meant are read as '-' too: the hyphen and the non-breaking hyphen (U+2010, U+2011: word
-- processors and web pages put them in ERR-4029 so that a line never breaks inside it),
-- the figure dash (U+2012, between digits), the en dash (U+2013, which editors put for a
-- typed '-') and the minus sign (U+2212). Before v7 they were not word characters and cut
-- an identifier in two: its parts were indexed, its joined form (err4029) was not. Only
-- between word characters does the '-' join anything (the token rules), so a dash set
-- between spaces still separates words. The em dash (U+2014) is left alone: prose sets
-- it between words without spaces ("the index, built at ingest, is" written with em dashes
-- for the commas), where it separates them.
drop function if exists pgfunnel._unicode_fold(text[]);
drop function if exists pgfunnel._fold_dashes(text[]);
create or replace function pgfunnel._unicode_fold(inputs text[], dashes boolean default false)
returns text[]
language plpgsql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
declare
    dash_chars text;
begin
    if getdatabaseencoding() <> 'UTF8' then
        return inputs;
    end if;
    -- (written with chr() once the encoding is known: another cannot hold these)
    dash_chars := chr(8208) || chr(8209) || chr(8210) || chr(8211) || chr(8722);
    -- A text of ASCII alone (as many bytes as characters) is its own NFKC form and holds
    -- none of the characters translated: kept as it is, it skips the normalization's
    -- per-character table lookups and two translates (most words of a batch, in English)
    return array(select case when octet_length(i.txt) = length(i.txt) then i.txt
                             else translate(translate(normalize(i.txt, nfkc),
                                                      chr(173) || chr(8203) || chr(8204)
                                                      || chr(8205) || chr(8288) || chr(65279), ''),
                                            dash_chars,
                                            case when dashes then '-----' else dash_chars end)
                        end
                   from unnest(inputs) with ordinality as i(txt, ord)
                  order by i.ord);
end
$$;

-- the v4 analyzers' pairs before v5 shared them
drop function if exists pgfunnel._cjk_bigrams(text[]);

-- each text with every run of the given characters (`chars`, the inside of a regular
-- expression's bracket) replaced by its overlapping pairs of characters (a lone
-- character by itself), spaced apart. v4 analyzers pass Han, Hiragana and Katakana:
-- those scripts put no space between words, so to the token rules a sentence in them is
-- one token, and a query matched only a chunk holding the very same run. v5 adds Hangul:
-- Korean puts spaces between words but writes particles and endings onto them, so
-- 데이터베이스 (database) and 데이터베이스를 (the database, as an object) were two terms.
-- Without a dictionary of the language, pairs are how search engines index these
-- scripts (Lucene's CJK bigrams, which take Hangul too): a two-character word is one
-- term, and a longer word's pairs are all in every chunk that holds it. A database whose
-- encoding is not UTF-8 holds none of these characters.
create or replace function pgfunnel._character_pairs(inputs text[], chars text)
returns text[]
language plpgsql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    if getdatabaseencoding() <> 'UTF8'
       -- (every character passed is past ASCII: a text of ASCII alone, as many bytes as
       -- characters, is not matched against the bracket, a regular expression per text)
       or not exists (select 1 from unnest(inputs) as i(txt)
                       where octet_length(i.txt) <> length(i.txt)
                         and i.txt ~ ('[' || chars || ']')) then
        return inputs;
    end if;
    return array(
        select case when i.txt !~ ('[' || chars || ']') then i.txt
                    else (select string_agg(
                                     case when r.m[1] !~ ('^[' || chars || ']') then r.m[1]
                                          when char_length(r.m[1]) = 1 then ' ' || r.m[1] || ' '
                                          -- each character once, paired with the next:
                                          -- substr(run, g, 2) walked the run from its start
                                          -- for every g, so a run of n characters took n^2
                                          -- steps (a query of 10,000 Chinese characters,
                                          -- the most a search takes, over a second)
                                          else ' ' || (select string_agg(p.a || p.b, ' '
                                                                         order by p.g)
                                                         from (select string_to_array(r.m[1], null)) as s(c),
                                                              unnest(s.c[1:cardinality(s.c) - 1],
                                                                     s.c[2:cardinality(s.c)])
                                                                  with ordinality as p(a, b, g))
                                               || ' '
                                     end, '' order by r.ord)
                            from regexp_matches(i.txt, '[' || chars || ']+|[^' || chars || ']+', 'g')
                                 with ordinality as r(m, ord))
               end
          from unnest(inputs) with ordinality as i(txt, ord)
         order by i.ord);
end
$$;

-- the characters that are never part of a word for the v6 analyzers, as the inside of a
-- regular expression's bracket: ASCII's controls, spaces and punctuation, and every
-- other code point whose Unicode category is a separator, punctuation, symbol, control,
-- format or private-use character (Unicode 14.0.0, 345 ranges; written by
-- scripts/unicode_word_class.py). Anything else, a letter, mark or digit of any script
-- or a code point not yet assigned, is part of a word: the database's locale decides
-- nothing. Postgres' regular expressions read a character as its Unicode code point in
-- UTF-8 and LATIN1 databases only (in other encodings as the encoding's own number), so
-- there the ranges past ASCII are left out, and every non-ASCII character is a letter.
-- Immutable, though it reads the encoding: a database's encoding never changes.
create or replace function pgfunnel._nonword_chars()
returns text
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select '\u0001-\u002f\u003a-\u0040\u005b-\u0060\u007b-\u007f'
           || case when pg_catalog.getdatabaseencoding() in ('UTF8', 'LATIN1') then
               '\u0080-\u00a9\u00ab-\u00b1\u00b4\u00b6-\u00b8\u00bb\u00bf\u00d7\u00f7\u02c2-\u02c5'
               '\u02d2-\u02df\u02e5-\u02eb\u02ed\u02ef-\u02ff\u0375\u037e\u0384-\u0385\u0387\u03f6'
               '\u0482\u055a-\u055f\u0589-\u058a\u058d-\u058f\u05be\u05c0\u05c3\u05c6\u05f3-\u05f4'
               '\u0600-\u060f\u061b-\u061f\u066a-\u066d\u06d4\u06dd-\u06de\u06e9\u06fd-\u06fe'
               '\u0700-\u070d\u070f\u07f6-\u07f9\u07fe-\u07ff\u0830-\u083e\u085e\u0888\u0890-\u0891'
               '\u08e2\u0964-\u0965\u0970\u09f2-\u09f3\u09fa-\u09fb\u09fd\u0a76\u0af0-\u0af1\u0b70'
               '\u0bf3-\u0bfa\u0c77\u0c7f\u0c84\u0d4f\u0d79\u0df4\u0e3f\u0e4f\u0e5a-\u0e5b'
               '\u0f01-\u0f17\u0f1a-\u0f1f\u0f34\u0f36\u0f38\u0f3a-\u0f3d\u0f85\u0fbe-\u0fc5'
               '\u0fc7-\u0fcc\u0fce-\u0fda\u104a-\u104f\u109e-\u109f\u10fb\u1360-\u1368\u1390-\u1399'
               '\u1400\u166d-\u166e\u1680\u169b-\u169c\u16eb-\u16ed\u1735-\u1736\u17d4-\u17d6'
               '\u17d8-\u17db\u1800-\u180a\u180e\u1940\u1944-\u1945\u19de-\u19ff\u1a1e-\u1a1f'
               '\u1aa0-\u1aa6\u1aa8-\u1aad\u1b5a-\u1b6a\u1b74-\u1b7e\u1bfc-\u1bff\u1c3b-\u1c3f'
               '\u1c7e-\u1c7f\u1cc0-\u1cc7\u1cd3\u1fbd\u1fbf-\u1fc1\u1fcd-\u1fcf\u1fdd-\u1fdf'
               '\u1fed-\u1fef\u1ffd-\u1ffe\u2000-\u2064\u2066-\u206f\u207a-\u207e\u208a-\u208e'
               '\u20a0-\u20c0\u2100-\u2101\u2103-\u2106\u2108-\u2109\u2114\u2116-\u2118\u211e-\u2123'
               '\u2125\u2127\u2129\u212e\u213a-\u213b\u2140-\u2144\u214a-\u214d\u214f\u218a-\u218b'
               '\u2190-\u2426\u2440-\u244a\u249c-\u24e9\u2500-\u2775\u2794-\u2b73\u2b76-\u2b95'
               '\u2b97-\u2bff\u2ce5-\u2cea\u2cf9-\u2cfc\u2cfe-\u2cff\u2d70\u2e00-\u2e2e\u2e30-\u2e5d'
               '\u2e80-\u2e99\u2e9b-\u2ef3\u2f00-\u2fd5\u2ff0-\u2ffb\u3000-\u3004\u3008-\u3020\u3030'
               '\u3036-\u3037\u303d-\u303f\u309b-\u309c\u30a0\u30fb\u3190-\u3191\u3196-\u319f'
               '\u31c0-\u31e3\u3200-\u321e\u322a-\u3247\u3250\u3260-\u327f\u328a-\u32b0\u32c0-\u33ff'
               '\u4dc0-\u4dff\ua490-\ua4c6\ua4fe-\ua4ff\ua60d-\ua60f\ua673\ua67e\ua6f2-\ua6f7'
               '\ua700-\ua716\ua720-\ua721\ua789-\ua78a\ua828-\ua82b\ua836-\ua839\ua874-\ua877'
               '\ua8ce-\ua8cf\ua8f8-\ua8fa\ua8fc\ua92e-\ua92f\ua95f\ua9c1-\ua9cd\ua9de-\ua9df'
               '\uaa5c-\uaa5f\uaa77-\uaa79\uaade-\uaadf\uaaf0-\uaaf1\uab5b\uab6a-\uab6b\uabeb'
               '\ue000-\uf8ff\ufb29\ufbb2-\ufbc2\ufd3e-\ufd4f\ufdcf\ufdfc-\ufdff\ufe10-\ufe19'
               '\ufe30-\ufe52\ufe54-\ufe66\ufe68-\ufe6b\ufeff\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40'
               '\uff5b-\uff65\uffe0-\uffe6\uffe8-\uffee\ufff9-\ufffd\U00010100-\U00010102'
               '\U00010137-\U0001013f\U00010179-\U00010189\U0001018c-\U0001018e\U00010190-\U0001019c'
               '\U000101a0\U000101d0-\U000101fc\U0001039f\U000103d0\U0001056f\U00010857'
               '\U00010877-\U00010878\U0001091f\U0001093f\U00010a50-\U00010a58\U00010a7f\U00010ac8'
               '\U00010af0-\U00010af6\U00010b39-\U00010b3f\U00010b99-\U00010b9c\U00010ead'
               '\U00010f55-\U00010f59\U00010f86-\U00010f89\U00011047-\U0001104d\U000110bb-\U000110c1'
               '\U000110cd\U00011140-\U00011143\U00011174-\U00011175\U000111c5-\U000111c8\U000111cd'
               '\U000111db\U000111dd-\U000111df\U00011238-\U0001123d\U000112a9\U0001144b-\U0001144f'
               '\U0001145a-\U0001145b\U0001145d\U000114c6\U000115c1-\U000115d7\U00011641-\U00011643'
               '\U00011660-\U0001166c\U000116b9\U0001173c-\U0001173f\U0001183b\U00011944-\U00011946'
               '\U000119e2\U00011a3f-\U00011a46\U00011a9a-\U00011a9c\U00011a9e-\U00011aa2'
               '\U00011c41-\U00011c45\U00011c70-\U00011c71\U00011ef7-\U00011ef8\U00011fd5-\U00011ff1'
               '\U00011fff\U00012470-\U00012474\U00012ff1-\U00012ff2\U00013430-\U00013438'
               '\U00016a6e-\U00016a6f\U00016af5\U00016b37-\U00016b3f\U00016b44-\U00016b45'
               '\U00016e97-\U00016e9a\U00016fe2\U0001bc9c\U0001bc9f-\U0001bca3\U0001cf50-\U0001cfc3'
               '\U0001d000-\U0001d0f5\U0001d100-\U0001d126\U0001d129-\U0001d164\U0001d16a-\U0001d16c'
               '\U0001d173-\U0001d17a\U0001d183-\U0001d184\U0001d18c-\U0001d1a9\U0001d1ae-\U0001d1ea'
               '\U0001d200-\U0001d241\U0001d245\U0001d300-\U0001d356\U0001d6c1\U0001d6db\U0001d6fb'
               '\U0001d715\U0001d735\U0001d74f\U0001d76f\U0001d789\U0001d7a9\U0001d7c3'
               '\U0001d800-\U0001d9ff\U0001da37-\U0001da3a\U0001da6d-\U0001da74\U0001da76-\U0001da83'
               '\U0001da85-\U0001da8b\U0001e14f\U0001e2ff\U0001e95e-\U0001e95f\U0001ecac\U0001ecb0'
               '\U0001ed2e\U0001eef0-\U0001eef1\U0001f000-\U0001f02b\U0001f030-\U0001f093'
               '\U0001f0a0-\U0001f0ae\U0001f0b1-\U0001f0bf\U0001f0c1-\U0001f0cf\U0001f0d1-\U0001f0f5'
               '\U0001f10d-\U0001f1ad\U0001f1e6-\U0001f202\U0001f210-\U0001f23b\U0001f240-\U0001f248'
               '\U0001f250-\U0001f251\U0001f260-\U0001f265\U0001f300-\U0001f6d7\U0001f6dd-\U0001f6ec'
               '\U0001f6f0-\U0001f6fc\U0001f700-\U0001f773\U0001f780-\U0001f7d8\U0001f7e0-\U0001f7eb'
               '\U0001f7f0\U0001f800-\U0001f80b\U0001f810-\U0001f847\U0001f850-\U0001f859'
               '\U0001f860-\U0001f887\U0001f890-\U0001f8ad\U0001f8b0-\U0001f8b1\U0001f900-\U0001fa53'
               '\U0001fa60-\U0001fa6d\U0001fa70-\U0001fa74\U0001fa78-\U0001fa7c\U0001fa80-\U0001fa86'
               '\U0001fa90-\U0001faac\U0001fab0-\U0001faba\U0001fac0-\U0001fac5\U0001fad0-\U0001fad9'
               '\U0001fae0-\U0001fae7\U0001faf0-\U0001faf6\U0001fb00-\U0001fb92\U0001fb94-\U0001fbca'
               '\U000e0001\U000e0020-\U000e007f\U000f0000-\U000ffffd\U00100000-\U0010fffd'
              else '' end
$$;

-- a term without its accents, for the german_v8 analyzer, which folds each term after
-- its stemmer has read the word as written: the combining diacritical marks (U+0300 -
-- U+036F) of its canonical decomposition removed, and the ligatures œ and æ written out,
-- as a keyboard without them types them (`coeur`); a term of marks alone is kept as it
-- is. The text of a database whose encoding is not UTF-8 is left as it is (Postgres
-- normalizes only UTF-8; written with chr(): another encoding cannot hold the ligatures).
create or replace function pgfunnel._fold_accents(term text)
returns text
language sql immutable parallel safe strict
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select case when term !~ '[^\x01-\x7f]' or getdatabaseencoding() <> 'UTF8' then term
                -- a word of marks alone (a lone accent the text shows as a character) keeps
                -- them: folded, it would be an empty term
                else coalesce(nullif(normalize(replace(replace(
                                  regexp_replace(normalize(term, nfd), '[\u0300-\u036f]', '', 'g'),
                                  chr(339), 'oe'), chr(230), 'ae'), nfc), ''), term)
           end
$$;

-- the most characters a reader's call of the analyzer takes: analyze's one text,
-- analyze_each's inputs in all, and _analyze_pass's for a role that may not write the
-- index. Written once, here, so the checks and their messages cannot disagree; a
-- megabyte took seconds (11 s of dotted words)
create or replace function pgfunnel._text_limit()
returns integer
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$ select 100000 $$;

-- the most characters a search's query_text takes (funnel_search, final), and analyze's
-- and analyze_each's for a query (for_query): what a traced final() logs and `versions
-- compare --last` replays. Written once, here, so the checks and their messages cannot
-- disagree; Python's defaults.QUERY_CHARS_MOST is tested against it
create or replace function pgfunnel._query_limit()
returns integer
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$ select 10000 $$;

-- the form before _analyze_pass took bound_all: left beside the new one, a call with
-- three arguments would match both
drop function if exists pgfunnel._analyze_pass(text[], text, text[]);

-- one pass of the analyzer over each input text, dropping `question_words` ('{}' for
-- documents): every token, what it became, and why anything was dropped. Ingest
-- analyses the distinct whitespace-separated words of a batch through analyze_each (the
-- token pattern never spans whitespace), so indexed terms and query terms come from one
-- implementation. `bound_all` holds every role to _text_limit() in all (analyze_each's
-- limit, counted here so a call counts its inputs once); without it only a role that
-- may not write the index is held to it: false cannot loosen what a reader may do.
create or replace function pgfunnel._analyze_pass(inputs text[], analyzer text,
                                                  question_words text[],
                                                  bound_all boolean default false)
returns table (input_ordinal integer, token_position integer, token text, term text, dropped text)
language plpgsql stable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
-- the custom plan is estimated cheaper, so plpgsql would re-plan this statement on every
-- call: planning it costs about three times what running it on a query does
set plan_cache_mode = force_generic_plan
set jit = off
as $$
declare
    stem_dict regdictionary;
    inner_names boolean := analyzer in ('english_v2', 'simple_v2', 'english_v3', 'simple_v3',
                                        'english_v4', 'simple_v4', 'english_v5', 'simple_v5',
                                        'english_v6', 'simple_v6', 'english_v7', 'simple_v7',
                                        'english_v8', 'simple_v8', 'german_v8');
    -- the v6 rules, which v7 and v8 keep
    v6 constant boolean := analyzer in ('english_v6', 'simple_v6', 'english_v7', 'simple_v7',
                                        'english_v8', 'simple_v8', 'german_v8');
    -- the underscores that open, close or join an identifier's parts are its own (v8)
    v8 constant boolean := analyzer in ('english_v8', 'simple_v8', 'german_v8');
    -- each term's accents folded after the language's stemmer has read the word
    fold_accents constant boolean := analyzer = 'german_v8';
    -- what a word is made of: v6 names it (_nonword_chars); before, the database's locale
    -- did ([[:alnum:]], ASCII only under a "C" collation)
    nonword constant text := case when v6 then pgfunnel._nonword_chars() end;
    word_run constant text := case when v6 then '[^' || nonword || ']+' else '[[:alnum:]]+' end;
    -- a token: runs of word characters joined by '.', '_' or '-'; under v8 also opened
    -- or closed by underscores, and joined by a run of them or by '.' or '-' with
    -- underscores beside it (__init__, _exit, sys.__stdout__, author__name). An
    -- underscore with no word character is no token
    token_run constant text := case when v8
                                    then '_*' || word_run || '(?:(?:_*[.-]_*|_+)' || word_run
                                         || ')*_*'
                                    else word_run || '(?:[._-]' || word_run || ')*' end;
    letter_run constant text := case when v6 then '[^0-9' || nonword || ']+'
                                     else '[[:alpha:]]+' end;
    digit_run constant text := case when v6 then '[0-9]+' else '[[:digit:]]+' end;
    -- Hiragana and Katakana (without the middle dot, a punctuation mark), the CJK
    -- unified ideographs with extension A, compatibility ideographs, extensions B and on
    cjk constant text := '\u3040-\u30fa\u30fc-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff'
                         '\U00020000-\U0003134f';
    -- Hangul syllables, conjoining jamo (with extensions A and B) and compatibility jamo
    hangul constant text := '\uac00-\ud7a3\u1100-\u11ff\ua960-\ua97f\ud7b0-\ud7ff\u3131-\u318e';
    -- the letters and marks of Thai, Lao, Burmese (with Myanmar extended A and B) and
    -- Khmer: their digits and punctuation are words and marks of their own
    unspaced constant text := '\u0e01-\u0e3a\u0e40-\u0e4e\u0e81-\u0e82\u0e84\u0e86-\u0e8a'
                              '\u0e8c-\u0ea3\u0ea5\u0ea7-\u0ebd\u0ec0-\u0ec4\u0ec6\u0ec8-\u0ecd'
                              '\u0edc-\u0edf\u1000-\u103f\u1050-\u108f\u109a-\u109d\u1780-\u17d3'
                              '\u17d7\u17dc-\u17dd\uaa60-\uaa76\uaa7a-\uaa7f\ua9e0-\ua9ef\ua9fa-\ua9fe';
    -- question words written in capitals, which are searched (_capitalised_words)
    capitalised text[] := '{}';
    -- per input, where its words that are not question words begin and end, and its
    -- first `do` (_frames_question); left NULL for documents
    first_content integer[];
    last_content integer[];
    first_do integer[];
    -- `work` closing a question asked with `do`, as `input:position` (see below)
    framing_work text[] := '{}';
    -- a letter alone after a word's apostrophe, as `input:position` (see below)
    apostrophe_letters text[] := '{}';
    -- (the queries below test these two for being empty before they build a token's
    -- `input:position` to look it up: a document's are always empty, and each token
    -- built the string, twice or three times, to compare with nothing)
begin
    -- Readers hold EXECUTE on this helper (analyze_each and each search run it as the
    -- caller), so its own call was a way round analyze_each's limit: a megabyte of dotted
    -- words took 11 s. A role that may not write the index is held to that limit here;
    -- ingest and reindex, which analyse a batch's distinct words in one call, write them.
    -- analyze_each's own limit (bound_all) is checked here too, so its inputs are counted
    -- once. array_to_string keeps the common case a plpgsql simple expression, and the
    -- privilege is looked up only past the limit
    if length(array_to_string(inputs, '')) > pgfunnel._text_limit() then
        if bound_all then
            perform pgfunnel._bad_parameter('inputs', format(
                'hold %s characters in all; the limit is %s, as for analyze''s input '
                '(split the texts over several calls)',
                length(array_to_string(inputs, '')), pgfunnel._text_limit()));
        elsif not has_table_privilege('pgfunnel.lexical', 'insert') then
            perform pgfunnel._bad_parameter('inputs', format(
                'hold %s characters in all; the limit is %s for a role that may not write '
                'the index (pgfunnel.lexical), as for analyze_each (split the texts over '
                'several calls)', length(array_to_string(inputs, '')), pgfunnel._text_limit()));
        end if;
    end if;
    select a.stem_dictionary::regdictionary into stem_dict
      from pgfunnel.analyzers() a where a.name = analyzer;
    if stem_dict is null then
        perform pgfunnel._bad_parameter('analyzer',
            format('unknown analyzer %L (known: %s)', analyzer,
                   (select string_agg(a.name, ', ') from pgfunnel.analyzers() a)));
    end if;
    if analyzer in ('english_v3', 'simple_v3', 'english_v4', 'simple_v4', 'english_v5',
                    'simple_v5', 'english_v6', 'simple_v6', 'english_v7', 'simple_v7',
                    'english_v8', 'simple_v8', 'german_v8') then
        inputs := pgfunnel._unicode_fold(inputs, analyzer in ('english_v7', 'simple_v7',
                                                              'english_v8', 'simple_v8',
                                                              'german_v8'));
    end if;
    -- A run of five or more underscores is a fill-in blank or a rule (`Signature__________`,
    -- a title underlined without a space), never a name's own: no name uses more than
    -- four (`____cacheline_aligned`). Read as part of the token it made a stray term of
    -- the word and its blank, and past 100 characters dropped the word with it (under v7
    -- the word was a term). It separates words, as it did before v8. (Read after folding:
    -- a full-width underscore is one.)
    if v8 and exists (select 1 from unnest(inputs) as i(txt) where strpos(i.txt, '_____') > 0) then
        inputs := array(select regexp_replace(i.txt, '_{5,}', ' ', 'g')
                          from unnest(inputs) with ordinality as i(txt, ord)
                         order by i.ord);
    end if;
    -- read before v6 lowers its inputs (below); the test first spares most queries the
    -- function's statement
    if cardinality(question_words) > 0 and array_to_string(inputs, ' ') ~ '[A-Z][A-Z]' then
        capitalised := pgfunnel._capitalised_words(inputs);
    end if;
    if analyzer in ('english_v4', 'simple_v4') then
        inputs := pgfunnel._character_pairs(inputs, cjk);
    elsif analyzer in ('english_v5', 'simple_v5') then
        inputs := pgfunnel._character_pairs(inputs, cjk || hangul);
    elsif v6 then
        -- lower case under a collation that knows every script's letters (a "C" database
        -- lowers ASCII only): the one `pgfunnel init` found for this database. Greek's
        -- final sigma (ς, which Σ never lowers to) is read as σ, as search engines fold it
        -- (Lucene's GreekLowerCaseFilter): ΛΟΓΟΣ finds λογος. Written with chr(), planned
        -- only in a UTF-8 database: another encoding cannot hold the letter.
        if getdatabaseencoding() = 'UTF8' then
            inputs := array(select translate(lower(i.txt collate @case_collation@), chr(962),
                                             chr(963)) collate "default"
                              from unnest(inputs) with ordinality as i(txt, ord)
                             order by i.ord);
        else
            inputs := array(select lower(i.txt collate @case_collation@) collate "default"
                              from unnest(inputs) with ordinality as i(txt, ord)
                             order by i.ord);
        end if;
        inputs := pgfunnel._character_pairs(inputs, cjk || hangul || unspaced);
    end if;
    -- Where each query's words that are not question words begin and end
    -- (_frames_question), over the tokens both paths below read (the compound pattern is
    -- the plain one where there is no joiner). Read only for a text that holds a word
    -- whose place counts (_naming_question_words, and `work`, below; every other question
    -- word is dropped wherever it stands), so documents and most queries skip the
    -- statement. The analyzer reads such a word as a piece with no letter beside it; here
    -- a digit or `_` counts as a boundary too, so the test errs only towards reading the
    -- frame.
    if cardinality(question_words) > 0
       and lower(array_to_string(inputs, ' '))
           ~ ('(^|[^a-z])(' || array_to_string(pgfunnel._naming_question_words(), '|')
              || '|works?)([^a-z]|$)') then
        select array_agg(f.first_content order by i.ord), array_agg(f.last_content order by i.ord),
               array_agg(f.first_do order by i.ord)
          into first_content, last_content, first_do
          from unnest(inputs) with ordinality as i(txt, ord),
               lateral (select min(m.ord::integer) filter (where m.match[1] <> all (question_words))
                                   as first_content,
                               max(m.ord::integer) filter (where m.match[1] <> all (question_words))
                                   as last_content,
                               min(m.ord::integer) filter (where m.match[1] in ('do', 'does', 'did'))
                                   as first_do
                          from regexp_matches(case when v6 then coalesce(i.txt, '')
                                                   else lower(coalesce(i.txt, '')) end,
                                              token_run, 'g')
                               with ordinality as m(match, ord)) f;
    end if;
    -- `work` (or `works`) in a question opening with `how` and asked with `do` frames it
    -- when it follows what the question asks about and only question words or nothing
    -- follow it: `how does asyncio work`, `how does the GIL work in python`, `how do
    -- sessions work with caching`. Searched, it favoured any text about work (`work in
    -- progress`, worker threads) over the subject. Elsewhere it is searched: `how do I
    -- work with dates`, `how does work stealing work` (the first), `how do I configure
    -- work queues`, and a yes-or-no question, where working is what is asked (`does s3
    -- work for the a-team`). (Read with the frame above, for a text that holds the word:
    -- documents and most queries skip it.)
    if first_content is not null
       and lower(array_to_string(inputs, ' ')) ~ '(^|[^a-z])works?([^a-z]|$)' then
        select coalesce(array_agg(t.inp || ':' || t.pos), '{}') into framing_work
          from (select i.ord as inp, m.ord as pos, m.match[1] as tok,
                       lead(m.match[1]) over (partition by i.ord order by m.ord) as next_tok,
                       first_value(m.match[1]) over (partition by i.ord order by m.ord)
                           as first_tok
                  from unnest(inputs) with ordinality as i(txt, ord),
                       regexp_matches(case when v6 then coalesce(i.txt, '')
                                           else lower(coalesce(i.txt, '')) end,
                                      token_run, 'g')
                       with ordinality as m(match, ord)) t
         where t.tok in ('work', 'works') and t.first_tok = 'how'
           and first_do[t.inp] < first_content[t.inp]
           and t.pos > first_content[t.inp]
           and (t.next_tok is null or t.next_tok = any (question_words))
           and (t.inp || ':' || t.tok) <> all (capitalised);
    end if;
    -- On the query side, a letter alone after a word's apostrophe (`gibt's`, `what's`,
    -- `don't`, `I'm`, `I'd`) is not searched: the apostrophe splits it off as a word of
    -- its own, and where the language's stop words lack it (german_v8 keeps `s` and
    -- `t`; english_v8 `d` and `m`) the query searched a one-letter term that most
    -- chunks hold. So are English's two-letter clitics after a letter (`I'll`, `we're`,
    -- `they've`: `ll`, `re` and `ve`, which no stop word list holds); after anything
    -- else (`('re')`) the word is the query's own. Documents index them as before (an
    -- indexed term changes only with a new analyzer version); a letter the query writes
    -- alone (`vitamin d`, `plan b`) is searched. Read over the tokens both paths below
    -- read, as the frame above is.
    if cardinality(question_words) > 0
       and array_to_string(inputs, ' ') ~ '[^[:space:]][''’][^[:space:]]' then
        select coalesce(array_agg(i.ord || ':' || m.ord), '{}') into apostrophe_letters
          from unnest(inputs) with ordinality as i(txt, ord),
               -- 1: an apostrophe after a letter, 2: after another character, 3: the token
               regexp_matches(case when v6 then coalesce(i.txt, '')
                                   else lower(coalesce(i.txt, '')) end,
                              '(?:((?<=' || left(letter_run, -1) || ')[''’])'
                              '|((?<=[^[:space:]])[''’]))?(' || token_run || ')', 'g')
               with ordinality as m(match, ord)
         where coalesce(m.match[1], m.match[2]) is not null
           and m.match[3] ~ ('^' || letter_run || '$')
           and (length(m.match[3]) = 1
                or (m.match[1] is not null and m.match[3] in ('ll', 're', 've')));
    end if;
    if not exists (select 1 from unnest(inputs) as i(txt)
                    where i.txt ~ case when v6 then '[0-9._-]' else '[[:digit:]._-]' end) then
        -- No digit and no joiner in any input: every token is a plain word, which is its
        -- own only piece, so the compound machinery below would find nothing to do. This
        -- path gives the same rows in about half the time (a query of plain words: 0.07
        -- against 0.2 ms).
        return query
        select i.ord::integer, m.ord::integer, m.match[1],
               case when length(m.match[1]) > 100 then null
                    when lx.is_question then null
                    when cardinality(apostrophe_letters) > 0
                         and (i.ord || ':' || m.ord) = any (apostrophe_letters) then null
                    when cardinality(lx.lexemes) > 0
                        then case when fold_accents then pgfunnel._fold_accents(lx.lexemes[1])
                                  else lx.lexemes[1] end
               end,
               case when length(m.match[1]) > 100 then 'longer than 100 characters'
                    when lx.is_question then 'question word'
                    when coalesce(cardinality(lx.lexemes), 0) = 0 then 'stop word'
                    when cardinality(apostrophe_letters) > 0
                         and (i.ord || ':' || m.ord) = any (apostrophe_letters)
                        then 'letter after an apostrophe'
               end
          from unnest(inputs) with ordinality as i(txt, ord),
               -- v6 lowered its inputs above, under the collation init chose
               regexp_matches(case when v6 then coalesce(i.txt, '')
                                   else lower(coalesce(i.txt, '')) end, word_run, 'g')
               with ordinality as m(match, ord),
               lateral (select case when length(m.match[1]) <= 100
                                    then ts_lexize(stem_dict, m.match[1]) end as lexemes,
                               -- false at once for documents (no question words); no
                               -- frame read (NULL), no word whose place counts
                               (m.match[1] = any (question_words)
                                and (i.ord || ':' || m.match[1]) <> all (capitalised)
                                and (first_content is null
                                     or pgfunnel._frames_question(
                                            m.match[1], m.ord::integer, first_content[i.ord],
                                            last_content[i.ord], first_do[i.ord])))
                               or (cardinality(framing_work) > 0
                                   and (i.ord || ':' || m.ord) = any (framing_work)) as is_question
                        offset 0) lx
         order by 1, 2;
        return;
    end if;
    return query
    with matched as (
        select i.ord::integer as inp, m.ord::integer as pos, m.match[1] as tok
          from unnest(inputs) with ordinality as i(txt, ord),
               regexp_matches(case when v6 then coalesce(i.txt, '')
                                   else lower(coalesce(i.txt, '')) end,
                              token_run, 'g')
               with ordinality as m(match, ord)
    ),
    token as (
        -- a longer run is not a word anyone types; it would bloat the term index. It is
        -- not searched, whole or in parts, and is reported (below)
        select t.* from matched t where length(t.tok) <= 100
    ),
    piece as (
        -- the whole compound form: identifiers as written, hyphenated forms joined
        select t.inp, t.pos, 0 as sub, t.tok,
               case when t.tok ~ '[._]' then t.tok else replace(t.tok, '-', '') end as piece,
               'whole' as kind
          from token t
         where t.tok ~ '[._-]'
        union all
        -- each part of the compound (the token itself when it has no joiner)
        select t.inp, t.pos, p.ord::integer, t.tok, p.part,
               case when p.part ~ ('^' || letter_run || '$') then 'word'
                    when p.part ~ ('^' || digit_run || '$') then 'number'
                    else 'mixed' end
          from token t,
               -- the joiners as one, split without a regular expression (a third of the
               -- cost of this branch)
               unnest(string_to_array(translate(t.tok, '._', '--'), '-'))
               with ordinality as p(part, ord)
         where p.part <> ''
        union all
        -- inner names of a dotted identifier (v2 analyzers): segments first..last, for
        -- every run shorter than the whole that is a compound (two or more segments, or
        -- one segment joined by '_' or '-')
        select t.inp, t.pos, 1000 + 100 * r.first + r.last, t.tok,
               case when r.name ~ '[._]' then r.name else replace(r.name, '-', '') end,
               'whole'
          from token t,
               lateral (select string_to_array(t.tok, '.') as segs) d,
               lateral (select f.first, l.last,
                               array_to_string(d.segs[f.first:l.last], '.') as name
                          from generate_series(1, cardinality(d.segs)) f(first),
                               generate_series(f.first, cardinality(d.segs)) l(last)
                         where l.last - f.first + 1 < cardinality(d.segs)) r
         -- a name of two segments has an inner name only where a segment is a compound
         -- (most dotted tokens are two plain segments: `pool.map`), so those skip the
         -- enumeration of runs
         where inner_names and t.tok ~ '[.]' and (t.tok ~ '[.].*[.]' or t.tok ~ '[_-]')
           and cardinality(d.segs) <= 8
           and (r.last > r.first or r.name ~ '[_-]')
    ),
    expanded as (
        select pc.inp, pc.pos, pc.sub, 0 as run, pc.tok, pc.piece, pc.kind from piece pc
        union all
        select t.inp, t.pos, 0, 0, t.tok, t.tok, 'too long'
          from matched t
         where length(t.tok) > 100
        union all
        -- letter/digit runs of a mixed part: err4029 -> err, 4029
        select pc.inp, pc.pos, pc.sub, r.ord::integer, pc.tok, r.m[1],
               case when r.m[1] ~ ('^' || letter_run || '$') then 'word' else 'number' end
          from piece pc,
               regexp_matches(pc.piece, letter_run || '|' || digit_run, 'g')
               with ordinality as r(m, ord)
         where pc.kind = 'mixed'
    ),
    analyzed as (
        select e.*,
               e.kind = 'word'
               and ((e.piece = any (question_words)
                     and (e.inp || ':' || e.piece) <> all (capitalised)
                     and (first_content is null
                          or pgfunnel._frames_question(e.piece, e.pos, first_content[e.inp],
                                                       last_content[e.inp], first_do[e.inp])))
                    -- (the token itself: a compound holding `work` is searched)
                    or (e.tok = e.piece and cardinality(framing_work) > 0
                        and (e.inp || ':' || e.pos) = any (framing_work)))
               as is_question,
               case when e.kind = 'word' then ts_lexize(stem_dict, e.piece) end as lexemes
          from expanded e
    )
    select a.inp, a.pos, a.tok,
           case
               when a.is_question or a.kind = 'too long' then null
               when a.kind = 'word' and cardinality(apostrophe_letters) > 0
                    and (a.inp || ':' || a.pos) = any (apostrophe_letters)
                   then null
               when a.kind <> 'word' and fold_accents then pgfunnel._fold_accents(a.piece)
               when a.kind <> 'word' then a.piece
               when a.lexemes is null or cardinality(a.lexemes) = 0 then null
               when fold_accents then pgfunnel._fold_accents(a.lexemes[1])
               else a.lexemes[1]
           end,
           case
               when a.is_question then 'question word'
               when a.kind = 'too long' then 'longer than 100 characters'
               when a.kind = 'word' and (a.lexemes is null or cardinality(a.lexemes) = 0)
                   then 'stop word'
               when a.kind = 'word' and cardinality(apostrophe_letters) > 0
                    and (a.inp || ':' || a.pos) = any (apostrophe_letters)
                   then 'letter after an apostrophe'
           end
      from analyzed a
     order by a.inp, a.pos, a.sub, a.run;
end
$$;

-- every token of each input text, what it became, and why anything was dropped. On the
-- query side (`for_query`) question words are dropped only from a text that keeps some
-- other term: `explain`, `tell` or `mean` alone is searched as a word (Werkzeug's
-- `tell`, Hypothesis' `explain` phase) rather than left with nothing to search.
-- (_pool runs the same two passes itself, the second only when the first leaves
-- nothing: this wrapper's cost is off a search's path.)
create or replace function pgfunnel.analyze_each(inputs text[], analyzer text default 'english_v8',
                                                 for_query boolean default false)
returns table (input_ordinal integer, token_position integer, token text, term text, dropped text)
language plpgsql stable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
set plan_cache_mode = force_generic_plan
set jit = off
as $$
declare
    too_long integer;
    too_long_chars integer;
begin
    if for_query is null then
        perform pgfunnel._bad_parameter('for_query', 'must be true or false, not NULL');
    end if;
    -- the limits of analyze's one input, for all of them together: one call analysed a
    -- megabyte or more (11 s of dotted words). Ingest, which analyses every distinct word
    -- of a batch whatever their length, calls _analyze_pass itself
    if for_query then
        select i.n, length(i.input) into too_long, too_long_chars
          from unnest(inputs) with ordinality as i(input, n)
         where length(i.input) > pgfunnel._query_limit() limit 1;
        if too_long is not null then
            perform pgfunnel._bad_parameter(format('inputs[%s]', too_long), format(
                'is %s characters long; the limit for a query is %s, as for '
                'funnel_search''s query_text', too_long_chars, pgfunnel._query_limit()));
        end if;
    end if;
    -- all of them together are held to analyze's limit for one input by _analyze_pass
    -- (bound_all), which counts them for its own bound on readers anyway
    if not for_query then
        return query select * from pgfunnel._analyze_pass(inputs, analyzer, '{}', true);
        return;
    end if;
    return query
    with first_pass as (
        select * from pgfunnel._analyze_pass(inputs, analyzer, pgfunnel._question_words(analyzer),
                                             true)
    ),
    bare as (
        -- inputs of which nothing is left but for question words
        select f.input_ordinal from first_pass f
         group by f.input_ordinal
        having bool_and(f.term is null) and bool_or(f.dropped = 'question word')
    )
    select f.* from first_pass f
     where f.input_ordinal <> all (array(select b.input_ordinal from bare b))
    union all
    -- read again without question words; the clitics stay dropped (`Gibt's` alone
    -- searched `s`, a term most German chunks hold). These inputs were held to the limit
    -- in all above: bound_all, so that they are not counted a second time for readers
    select b.input_ordinal, w.token_position, w.token,
           case when c.token_position is null then w.term end,
           coalesce(c.dropped, w.dropped)
      from bare b
     cross join lateral pgfunnel._analyze_pass(array[inputs[b.input_ordinal]], analyzer,
                                               '{}', true) w
      left join first_pass c on c.input_ordinal = b.input_ordinal
                            and c.token_position = w.token_position
                            and c.dropped = 'letter after an apostrophe';
end
$$;

-- every token of a text, what it became, and why anything was dropped
-- the length analyze_tokens, analyze and dropped_query_words take, for a caller to look at
-- one text: a query's limit (funnel_search's query_text) with for_query, ten times it for
-- a document's text, over any chunk ingest writes. A megabyte took seconds (11 s of
-- dotted words), the most a call a reader may make should cost; analyze_each takes as
-- much in all, and ingest calls _analyze_pass, which takes any length.
create or replace function pgfunnel._check_analyze_input(input text, for_query boolean)
returns void
language plpgsql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    if for_query and length(input) > pgfunnel._query_limit() then
        perform pgfunnel._bad_parameter('input', format(
            'is %s characters long; the limit for a query is %s, as for funnel_search''s '
            'query_text', length(input), pgfunnel._query_limit()));
    elsif length(input) > pgfunnel._text_limit() then
        perform pgfunnel._bad_parameter('input', format(
            'is %s characters long; the limit is %s (split the text over several calls)',
            length(input), pgfunnel._text_limit()));
    end if;
end
$$;

create or replace function pgfunnel.analyze_tokens(input text, analyzer text default 'english_v8',
                                                   for_query boolean default false)
returns table (token_position integer, token text, term text, dropped text)
language plpgsql stable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    perform pgfunnel._check_analyze_input(input, for_query);
    return query
    select e.token_position, e.token, e.term, e.dropped
      from pgfunnel.analyze_each(array[input], analyzer, for_query) e;
end
$$;

-- the terms a text becomes (what the lexical leg sees), in order
create or replace function pgfunnel.analyze(input text, analyzer text default 'english_v8',
                                            for_query boolean default false)
returns text[]
language sql stable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select coalesce(array_agg(t.term order by t.token_position), '{}'::text[])
      from pgfunnel.analyze_tokens(input, analyzer, for_query) t
     where t.term is not null
$$;

-- the query words the analyzer dropped whole, so callers can say so instead of failing
-- silently; a word of which some part is searched (`s3` without its stop word `s`) is not one
create or replace function pgfunnel.dropped_query_words(input text, analyzer text default 'english_v8')
returns text[]
language sql stable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select coalesce(array_agg(distinct w.token), '{}'::text[])
      from (select t.token_position, t.token
              from pgfunnel.analyze_tokens(input, analyzer, true) t
             group by t.token_position, t.token
            having bool_and(t.term is null)) w
$$;
