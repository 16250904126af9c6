copy (select 1 as x) to 'written_by_sql.csv';
