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
--   * query side only: question words and question glue are dropped
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
           ('simple_v5',  'simple',       'simple_v4, with Korean words also indexed as pairs of characters');
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

-- each text in the form v3 analyzers read: Unicode compatibility normalization (NFKC:
-- composed accents, `ﬁ` as `fi`, full-width `ｒｅｆ` as `ref`), then without the
-- characters that are invisible inside a word (soft hyphen, zero-width space, non-joiner
-- and joiner, word joiner, byte-order mark), which would otherwise split it. A database
-- whose encoding is not UTF-8 holds no text to fold (Postgres normalizes only UTF-8).
create or replace function pgfunnel._unicode_fold(inputs text[])
returns text[]
language plpgsql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    if getdatabaseencoding() <> 'UTF8' then
        return inputs;
    end if;
    return array(select translate(normalize(i.txt, nfkc),
                                  chr(173) || chr(8203) || chr(8204) || chr(8205) || chr(8288)
                                  || chr(65279), '')
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
       or not exists (select 1 from unnest(inputs) as i(txt) where i.txt ~ ('[' || chars || ']')) then
        return inputs;
    end if;
    return array(
        select case when i.txt !~ ('[' || chars || ']') then i.txt
                    else (select string_agg(
                                     case when r.m[1] !~ ('^[' || chars || ']') then r.m[1]
                                          when char_length(r.m[1]) = 1 then ' ' || r.m[1] || ' '
                                          else ' ' || (select string_agg(substr(r.m[1], g, 2), ' '
                                                                         order by g)
                                                         from generate_series(1, char_length(r.m[1]) - 1) g)
                                               || ' '
                                     end, '' order by r.ord)
                            from regexp_matches(i.txt, '[' || chars || ']+|[^' || chars || ']+', 'g')
                                 with ordinality as r(m, ord))
               end
          from unnest(inputs) with ordinality as i(txt, ord)
         order by i.ord);
end
$$;

-- every token of each input text, what it became, and why anything was dropped.
-- Ingest analyses the distinct whitespace-separated words of a batch through this
-- function (the token pattern never spans whitespace), so indexed terms and query
-- terms come from one implementation.
create or replace function pgfunnel.analyze_each(inputs text[], analyzer text default 'english_v5',
                                                 for_query boolean default false)
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
    question_words text[] := case when for_query then pgfunnel._question_words() else '{}' end;
    inner_names boolean := analyzer in ('english_v2', 'simple_v2', 'english_v3', 'simple_v3',
                                        'english_v4', 'simple_v4', 'english_v5', 'simple_v5');
    -- Hiragana and Katakana (without the middle dot, a punctuation mark), the CJK
    -- unified ideographs with extension A, compatibility ideographs, extensions B and on
    cjk constant text := '\u3040-\u30fa\u30fc-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff'
                         '\U00020000-\U0003134f';
    -- Hangul syllables, conjoining jamo (with extensions A and B) and compatibility jamo
    hangul constant text := '\uac00-\ud7a3\u1100-\u11ff\ua960-\ua97f\ud7b0-\ud7ff\u3131-\u318e';
begin
    select a.stem_dictionary::regdictionary into stem_dict
      from pgfunnel.analyzers() a where a.name = analyzer;
    if stem_dict is null then
        perform pgfunnel._bad_parameter('analyzer',
            format('unknown analyzer %L (known: %s)', analyzer,
                   (select string_agg(a.name, ', ') from pgfunnel.analyzers() a)));
    end if;
    if analyzer in ('english_v3', 'simple_v3', 'english_v4', 'simple_v4', 'english_v5',
                    'simple_v5') then
        inputs := pgfunnel._unicode_fold(inputs);
    end if;
    if analyzer in ('english_v4', 'simple_v4') then
        inputs := pgfunnel._character_pairs(inputs, cjk);
    elsif analyzer in ('english_v5', 'simple_v5') then
        inputs := pgfunnel._character_pairs(inputs, cjk || hangul);
    end if;
    if not exists (select 1 from unnest(inputs) as i(txt) where i.txt ~ '[[:digit:]._-]') then
        -- No digit and no joiner in any input: every token is a plain word, which is its
        -- own only piece, so the compound machinery below would find nothing to do. This
        -- path gives the same rows in about half the time (a query of plain words: 0.07
        -- against 0.2 ms).
        return query
        select i.ord::integer, m.ord::integer, m.match[1],
               case when length(m.match[1]) > 100 then null
                    when m.match[1] = any (question_words) then null
                    when cardinality(lx.lexemes) > 0 then lx.lexemes[1]
               end,
               case when length(m.match[1]) > 100 then 'longer than 100 characters'
                    when m.match[1] = any (question_words) then 'question word'
                    when coalesce(cardinality(lx.lexemes), 0) = 0 then 'stop word'
               end
          from unnest(inputs) with ordinality as i(txt, ord),
               regexp_matches(lower(coalesce(i.txt, '')), '[[:alnum:]]+', 'g')
               with ordinality as m(match, ord),
               lateral (select case when length(m.match[1]) <= 100
                                    then ts_lexize(stem_dict, m.match[1]) end as lexemes
                        offset 0) lx
         order by 1, 2;
        return;
    end if;
    return query
    with matched as (
        select i.ord::integer as inp, m.ord::integer as pos, m.match[1] as tok
          from unnest(inputs) with ordinality as i(txt, ord),
               regexp_matches(lower(coalesce(i.txt, '')),
                              '[[:alnum:]]+(?:[._-][[:alnum:]]+)*', 'g')
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
               case when p.part ~ '^[[:alpha:]]+$' then 'word'
                    when p.part ~ '^[[:digit:]]+$' then 'number'
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
               case when r.m[1] ~ '^[[:alpha:]]+$' then 'word' else 'number' end
          from piece pc,
               regexp_matches(pc.piece, '[[:alpha:]]+|[[:digit:]]+', 'g')
               with ordinality as r(m, ord)
         where pc.kind = 'mixed'
    ),
    analyzed as (
        select e.*, e.kind = 'word' and e.piece = any (question_words) as is_question,
               case when e.kind = 'word' then ts_lexize(stem_dict, e.piece) end as lexemes
          from expanded e
    )
    select a.inp, a.pos, a.tok,
           case
               when a.is_question or a.kind = 'too long' then null
               when a.kind <> 'word' then a.piece
               when a.lexemes is null or cardinality(a.lexemes) = 0 then null
               else a.lexemes[1]
           end,
           case
               when a.is_question then 'question word'
               when a.kind = 'too long' then 'longer than 100 characters'
               when a.kind = 'word' and (a.lexemes is null or cardinality(a.lexemes) = 0)
                   then 'stop word'
           end
      from analyzed a
     order by a.inp, a.pos, a.sub, a.run;
end
$$;

-- every token of a text, what it became, and why anything was dropped
create or replace function pgfunnel.analyze_tokens(input text, analyzer text default 'english_v5',
                                                   for_query boolean default false)
returns table (token_position integer, token text, term text, dropped text)
language sql stable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select e.token_position, e.token, e.term, e.dropped
      from pgfunnel.analyze_each(array[input], analyzer, for_query) e
$$;

-- the terms a text becomes (what the lexical leg sees), in order
create or replace function pgfunnel.analyze(input text, analyzer text default 'english_v5',
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
create or replace function pgfunnel.dropped_query_words(input text, analyzer text default 'english_v5')
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
